// SPDX-License-Identifier: Apache-2.0
#pragma once
// ZS_TEST_ASAN is 1 in a build with AddressSanitizer (scripts/sanitize.sh), where a few things a
// test relies on do not hold: mlock is a no-op that reports success, an address-space limit leaves
// no room for the sanitizer's shadow memory, and SentencePiece's module cannot be loaded (it needs
// RTLD_DEEPBIND). The tests that need them skip there, saying why; scripts/sanitize.sh lists them.

#if defined(__SANITIZE_ADDRESS__)
#define ZS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZS_TEST_ASAN 1
#endif
#endif
#ifndef ZS_TEST_ASAN
#define ZS_TEST_ASAN 0
#endif

// Skips a test that loads a SentencePiece tokenizer.model in an AddressSanitizer build.
#define ZS_SKIP_SENTENCEPIECE_UNDER_ASAN() \
  if (ZS_TEST_ASAN) GTEST_SKIP() << "AddressSanitizer build: SentencePiece's module needs RTLD_DEEPBIND"
