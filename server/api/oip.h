/* server/api/oip.h: the Open Inference Protocol (KServe v2) inference request,
 * decoded into the one request type, attnd_request_t (request.h), so that
 * it runs through the same queue, limits, memory budget and deadlines as
 * /v1. This is the JSON form alone; HTTP (routes, status codes, the
 * {"error": ...} body) and Triton's binary tensor extension come on top.
 *
 * The models:
 *   "attention", the generic model: /v1's inline mode. Inputs query, key,
 *     value, q_weight, k_weight, v_weight, o_weight, q_bias, k_bias,
 *     v_bias, o_bias; parameters num_heads (required), num_kv_heads,
 *     rope_theta, rope_dims, rope_style (any of the three turns rope on:
 *     style "half" and theta 10000 unless given, dims 0 meaning Dh).
 *   a loaded layer, by its name (GET /v1/layers): its weights, head counts,
 *     norms, rope and default causal alignment; inputs query, key and value
 *     are hidden states of its embed dim. The generic model's own inputs
 *     and parameters are refused on it. A layer named "attention" is
 *     shadowed by the generic model.
 * Both take inputs key_lengths (INT32 or INT64 [B]), allow (BOOL, rank 2
 * to 4, broadcastable to [B, H, Lq, Lk]), bias (rank 2 to 4, the same),
 * positions_query and positions_key (INT32 or INT64, [L] or [B, L], with
 * rope); and parameters causal (true, false, "none", "bottom_right" or
 * "top_left"), window_left, window_right, alibi (true or false), scale,
 * softcap, timeout_ms, and binary_data_output (recorded for the reply).
 *
 * The body: {"id"?, "parameters"?, "inputs": [{"name", "shape",
 * "datatype", "parameters"?, "data"}], "outputs"?: [{"name",
 * "parameters"?: {"binary_data"?}}]}. Unknown members are refused, as in
 * /v1. Float inputs take FP32, FP16, BF16 or FP64, integer inputs INT32
 * or INT64, allow BOOL. JSON data is flat, row-major, with exactly the
 * shape's element count, or nested arrays of exactly the shape; leaves are
 * numbers (for FP16 and BF16 too: each is converted to float32 directly,
 * not rounded to the declared type first, as tritonclient sends the exact
 * values of the tensor), integers within the datatype's range, or for BOOL
 * true, false, 0 or 1. An input with "parameters": {"binary_data_size":
 * n} and no "data" takes the next n bytes of the binary data instead: its
 * elements little-endian and row-major, one byte (0 or 1) for BOOL, FP16,
 * BF16 and FP64 converted to float32 (each must be finite).
 *
 * Outputs: output [B, Lq, Eo], weights [B, H, Lq, Lk], weights_mean
 * [B, Lq, Lk] and head_outputs [B, H, Lq, Dv]; a request that names none
 * gets output alone (not every output, as the protocol says: weights are
 * computed only when asked for). The request records them in oip_outputs,
 * oip_binary and oip_order (request.h).
 *
 * Errors use /v1's codes and wording, and name the member by its path in
 * the OIP body: "inputs[2].shape", "inputs[0].data[1][3]" (in the message;
 * the field is "inputs[0].data"), "parameters.num_heads", "outputs[1].name";
 * an input that the core's checks name is "inputs[i]", a layer's own
 * values "model". An unknown model is unknown_layer (404). */
#ifndef ATTND_OIP_H
#define ATTND_OIP_H

#include <stddef.h>
#include <stdint.h>

#include "codec/buf.h"
#include "config.h"
#include "errors.h"
#include "model/layers.h"
#include "sched/request.h"

/* The generic model's name. */
#define ATTND_OIP_GENERIC "attention"

/* Decodes the OIP inference request body[0..len) for `model` (the URL's
 * name, NUL-terminated) into a new request (*out): every input converted,
 * the parameters and outputs read, the attention planned and the
 * configured limits checked, as attnd_request_decode does for /v1. With
 * json_len >= 0 (the request's Inference-Header-Content-Length), the JSON
 * is body[0..json_len) and the bytes after it are Triton's binary tensor
 * data, taken in order by the inputs with a binary_data_size, which must
 * take them all; with -1, the whole body is JSON. With own (may be NULL),
 * *own is the malloc'd block of own_bytes that holds the body: a request
 * decoded may take it (*own is then NULL; a failed decode leaves it), and
 * use FP32 data aligned in it where it lies, with no copy. JSON data
 * arrays of numbers are read by the bulk scanner (codec/bulk.h)
 * rather than jansson, which reads only the rest, within
 * max_json_structure_bytes; an error about their values is worded by a
 * decode of the whole text by jansson, so that both give the same. With a layer
 * model, the
 * request holds a reference to `layers`. Returns 0, or -1 with `err` set
 * (unknown_layer for an unknown model, invalid_json, bad_request for
 * framing that does not add up, a 422 code for an invalid request,
 * out_of_memory). Borrows its arguments. HTTP thread. */
int attnd_oip_decode(const char *model, const char *body, size_t len,
                     int64_t json_len, void **own, size_t own_bytes,
                     const attnd_config_t *cfg, attnd_layer_set_t *layers,
                     attnd_request_t **out, attnd_error_t *err);

/* attnd_oip_decode by one path, for tests and fuzzers: fast = 0 has
 * jansson read the whole JSON, fast = 1 is attnd_oip_decode. Both must give
 * the same request, or the same error. Internal. */
int attnd__oip_decode_path(const char *model, const char *body, size_t len,
                           int64_t json_len, void **own, size_t own_bytes,
                           int fast, const attnd_config_t *cfg,
                           attnd_layer_set_t *layers, attnd_request_t **out,
                           attnd_error_t *err);

/* Finds `model`: 0 with *layer NULL for the generic model, or the loaded
 * layer of that name; else -1 with err (unknown_layer, naming the models).
 * Borrows its arguments. Any thread. */
int attnd_oip_model(const char *model, attnd_layer_set_t *layers,
                    const attnd_layer_t **layer, attnd_error_t *err);

/* GET /v2/models/{model}: the model's metadata, its inputs and outputs
 * with their datatypes and shapes (-1 for a variable dimension), appended
 * to b as one JSON line. Returns 0, or -1 with err as attnd_oip_model.
 * HTTP thread. */
int attnd_oip_metadata(const char *model, attnd_layer_set_t *layers,
                       attnd_buf_t *b, attnd_error_t *err);

/* GET /v2: {"name", "version", "extensions"}, appended to b. */
void attnd_oip_server_metadata(attnd_buf_t *b);

/* Writes the 200 reply of a computed OIP request for `model` into b: the
 * JSON ({"model_name", "model_version", "id"?, "outputs"}), whose length
 * goes in *json_len, then the outputs asked for as binary data, in the
 * order asked, as float32 little-endian (*json_len is b->len when there is
 * none). Fills *total_ms as attnd_request_encode. HTTP thread. */
void attnd_oip_encode(attnd_request_t *req, const char *model, attnd_buf_t *b,
                      size_t *json_len, double *total_ms);

#endif
