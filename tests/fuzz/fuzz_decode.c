/* tests/fuzz/fuzz_decode.c: request decoding on both paths, compared.
 *
 * The input is a request body. decode_diff (tests/decode_diff.h) decodes
 * it by jansson alone and with the bulk scanner's fast path, and this
 * aborts, printing the difference, unless both give the same request or
 * the same error (code, field and message). ASan and UBSan watch both
 * decoders, the bulk scanner, the base64 and number codecs under them, and
 * the core's planning.
 *
 * The limits are small (fuzz_small_config, as the http harness's) so that
 * a body that asks for a big shape is refused before anything of that size
 * is allocated; the fast path lifts every array of numbers under a tensor's
 * member and strings of 1024 characters or more, which bodies of a few KB
 * reach. One layer is
 * loaded, "L" (fuzz_layer: torch_mha, E = 8, H = 2, RoPE, causal),
 * so that bodies naming it take the layer's path.
 *
 * Beside it, attnd__dec_find_id (the one pass that reads a body's id when
 * its parse ran out of memory) against jansson's tree: on every body that
 * jansson reads as an object, the same id, or none. */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "api/decode.h"
#include "config.h"
#include "decode_diff.h"
#include "fuzz.h"
#include "model/layers.h"

static attnd_config_t cfg;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_small_config(&cfg, NULL, NULL);
  attnd_layer_set_t *set = fuzz_layer(1);
  decode_diff_set_layers(set); /* held for the process's life */
  return 0;
}

static void check_find_id(const char *body, size_t size) {
  attnd_error_t err = {0};
  attnd__dec_find_id(body, size, &err);
  json_error_t je;
  json_t *root = json_loadb(body, size, JSON_REJECT_DUPLICATES, &je);
  if (!json_is_object(root)) {
    json_decref(root);
    return;
  }
  json_t *id = json_object_get(root, "id");
  int want = json_is_string(id) && json_string_length(id) <= ATTND_ID_MAX;
  FUZZ_CHECK(err.has_id == want, "find_id: has_id %d, jansson's tree %d",
             err.has_id, want);
  FUZZ_CHECK(!want || strcmp(err.id, json_string_value(id)) == 0,
             "find_id: id '%s', jansson's '%s'", err.id, json_string_value(id));
  json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_find_id((const char *)data, size);
  char why[2048];
  FUZZ_CHECK(decode_diff((const char *)data, size, &cfg, why, sizeof why) == 0,
             "the two decoding paths differ: %s", why);
  return 0;
}
