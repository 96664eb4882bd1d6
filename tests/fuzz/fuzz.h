/* tests/fuzz/fuzz.h: what the libFuzzer harnesses share.
 *
 * FUZZ_CHECK(cond, fmt, ...) stops the run when a property does not hold:
 * it prints the message to fuzz_report_fd and aborts, which libFuzzer
 * reports as a crash and saves the input (crash-<sha1>) for replay. A
 * harness whose code under test is chatty on stderr runs with
 * -close_fd_mask=2 (tests/fuzz/fuzz_<name>.options) and sets
 * fuzz_report_fd to a copy of stderr in LLVMFuzzerInitialize, which
 * libFuzzer calls before it closes stderr. */
#ifndef ATTN_TESTS_FUZZ_H
#define ATTN_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((unused)) static int fuzz_report_fd = 2;

#define FUZZ_CHECK(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      dprintf(fuzz_report_fd, "%s:%d: fuzz check failed: ", __FILE__,          \
              __LINE__);                                                       \
      dprintf(fuzz_report_fd, __VA_ARGS__);                                    \
      dprintf(fuzz_report_fd, "\n");                                           \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* Loads `cfg` (an attnd_config_t) from the defaults, the small limits
 * the decode and http harnesses share (a body that asks for a big shape
 * is refused before anything of its size is allocated), the flags of
 * `extra` (NULL-terminated, or NULL) and the ATTND_* of `envp` (or NULL).
 * Aborts when that configuration does not load. */
struct attnd_config;
void fuzz_small_config(struct attnd_config *cfg, char *const *extra,
                       char **envp);

/* The harnesses' layer "L": torch_mha, E = 8, H = 2, RoPE (theta 100),
 * causal (bottom right) with `causal`, fixed weights; written to a file
 * of this process's and loaded. Aborts when it does not load. */
struct attnd_layer_set;
struct attnd_layer_set *fuzz_layer(int causal);

/* libFuzzer's entry points (declared here for -Wmissing-prototypes). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
