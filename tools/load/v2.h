/* tools/load/v2.h: attnd-load's side of the Open Inference Protocol
 * (KServe v2, as Triton speaks it over HTTP): the inference path, request
 * bodies written byte for byte as tritonclient.http writes them, and the
 * replies read as tritonclient reads them.
 *
 * A body (load_gen_request with LOAD_V2 calls load_v2_body) is compact
 * JSON with the members in tritonclient's order:
 *   {"inputs":[...],"outputs":[...],"parameters":{...}}
 * and no "id". Each input is {"name","shape","datatype","parameters",
 * "data"} with the members that apply, in the order of gen.h's tensors:
 * query, key and value when sent, q_weight, k_weight, v_weight and o_weight
 * with inline projections (the generic model "attention" only), and
 * key_lengths (INT32 [B]); every float tensor is FP32, row-major, or
 * with a 16-bit dtype (gen.h) FP16 or BF16, two bytes an element in the
 * binary tail, and the parameters end with "output_datatype" naming it.
 *   - binary tensors: each input has "parameters":{"binary_data_size":n}
 *     and no data, and the raw little-endian bytes of every input follow
 *     the JSON, in input order; the JSON's length goes in the header
 *     Inference-Header-Content-Length (load_request_t.json_len). With no
 *     weights asked, no outputs are named and the parameters start with
 *     "binary_data_output":true (what tritonclient sends then); with
 *     weights, "outputs" names output and weights (or weights_mean), each
 *     with "parameters":{"binary_data":true}.
 *   - JSON tensors: each input has "data", a flat array (floats as the
 *     shortest text that reads back to the same float32), and "outputs"
 *     always names its outputs with "binary_data":false (tritonclient sends
 *     binary_data_output true whenever it names none).
 * The parameters: num_heads and num_kv_heads (the generic model only),
 * causal (its name: "none", "bottom_right" or "top_left") and timeout_ms
 * when set, after binary_data_output when that is sent.
 *
 * Pure functions of their arguments; any thread. */
#ifndef LOAD_V2_H
#define LOAD_V2_H

#include <stddef.h>
#include <stdint.h>

#include "codec/buf.h"
#include "gen.h"

/* The generic model, whose projections come as inputs. */
#define LOAD_V2_GENERIC "attention"

/* Writes "/v2/models/<model>/infer" into buf[0..n), NUL-terminated, the
 * model name percent-encoded: every byte but A-Z a-z 0-9 - . _ ~ becomes
 * %XX (so '/' too). Returns the length, or -1 when it does not fit. */
int load_v2_path(char *buf, size_t n, const char *model);

/* Appends the body of request `r`, generated for `s` (protocol LOAD_V2),
 * to b, and stores the length of its JSON part in *json_len when the
 * tensors are binary (the body is then longer), else 0. Borrows s and r. */
void load_v2_body(const load_shape_t *s, const load_request_t *r,
                  attnd_buf_t *b, size_t *json_len);

/* Decodes output `name` of an OIP inference reply body[0..len) into
 * out[0..prod(dim)). `header_len` is the reply's
 * Inference-Header-Content-Length, or -1 when it had none: the JSON is
 * body[0..header_len), else the whole body. As tritonclient does, an
 * output with "parameters":{"binary_data_size":n} takes the n bytes after
 * the JSON that follow those of the binary outputs before it; one without
 * takes its "data" (a flat array, or nested arrays of its shape). The
 * output must be FP32 of shape dim[0..rank), and the binary sizes must add
 * up to the bytes after the JSON. Returns 0, or -1 with the reason in
 * why[0..wn) ("reply weights: ...", "reply: error 'text'" for an error
 * body). Borrows everything. */
int load_v2_reply_tensor(const char *body, size_t len, int64_t header_len,
                         const char *name, int rank, const int64_t *dim,
                         float *out, char *why, size_t wn);

/* The same for a reply to a request with output_datatype `dtype`: the
 * output must be that datatype (FP32, FP16 or BF16); binary data is two
 * bytes an element for the 16-bit ones, widened exactly into out, and
 * JSON data must hold values of that datatype (load_dtype_exact). */
int load_v2_reply_tensor_as(const char *body, size_t len, int64_t header_len,
                            const char *name, attnd_dtype_t dtype, int rank,
                            const int64_t *dim, float *out, char *why,
                            size_t wn);

#endif
