// SPDX-License-Identifier: Apache-2.0
// The translation unit that builds zeroshard's precompiled LibTorch headers (cmake/ZeroshardPch.cmake).
