// The translation unit that builds zeroshard's precompiled LibTorch headers (cmake/ZeroshardPch.cmake).
