/* server/model/layers.c: attention layers found in safetensors files and
 * held resident as float32 (layers.h). The load's passes 1 and 2 are in
 * layer_source.c, pass 4's parameters in layer_params.c.
 *
 * A load runs in passes, path by path of the list:
 *   1. open: the file, or the *.safetensors files of a directory that
 *      its model.safetensors or model.safetensors.index.json chooses (the
 *      others are kept by name, for the log), and its config.json; map
 *      and parse every file;
 *   2. gather: the tensors of all the path's files in one table sorted by
 *      name, so that a layer may span shards (a name in two files is an
 *      error);
 *   3. discover: a tensor whose name ends as a convention's query weight,
 *      after an empty prefix or one that ends with '.', starts a layer; its
 *      other tensors are looked up by name;
 *   4. resolve: head counts, rope, causal, sliding window and norm_eps
 *      from config.json,
 *      then the __metadata__ of the file that holds the query weight, then
 *      the convention's defaults; every shape is checked against them;
 *   5. convert: each weight into a new 64-byte-aligned float32 buffer, split
 *      out of a fused q/k/v tensor and transposed where the convention
 *      stores it input-major.
 * The path's files are unmapped when it is done. Then the layers of all
 * paths are sorted by name, and a name found twice is an error. */
#include "model/layers.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/half.h"
#include "codec/util.h"
#include "model/layer_build.h"
#include "model/safetensors.h"

static const char *const CONVENTION_NAMES[] = {
#define CONV_NAME(name, text) text,
    ATTND_CONVENTION_MAP(CONV_NAME)
#undef CONV_NAME
};

const char *attnd_convention_name(attnd_convention_t c) {
  size_t n = sizeof CONVENTION_NAMES / sizeof *CONVENTION_NAMES;
  return (size_t)c < n ? CONVENTION_NAMES[c] : "unknown";
}

struct attnd_layer_set {
  atomic_size_t refs;
  attnd_layer_t *layers; /* sorted by name; each owns its name, file and
                            buffers */
  size_t n, cap;
  size_t bytes;
  double seconds;
  /* with the layers on the device: where their blocks came from and what
   * they hold of the GPU's budget */
  attnd_device_memory_t mem;
  attnd_budget_t *budget;
  int64_t device_held;
  int device_bf16;             /* the weights there as bfloat16 */
  int counted;                 /* in live_sets and live_bytes */
  attnd_budget_t *host_budget; /* counting bytes since a reload replaced it */
  attnd_layer_skip_t *skips;   /* one a directory that left files out */
  size_t n_skips;
};

/* Every set with layers that is alive, process-wide: the one serving and
 * the old ones that requests or sessions still hold after a reload
 * (attnd_layer_sets_alive). */
static atomic_size_t live_sets, live_bytes;

/* ---- the conventions ----------------------------------------------------- */

static const form_t FORMS[] = {
    {.conv = ATTND_CONV_TORCH_MHA,
     .names = {[Q_W] = "in_proj_weight",
               [O_W] = "out_proj.weight",
               [Q_B] = "in_proj_bias",
               [O_B] = "out_proj.bias"},
     .fused_w = 1,
     .fused_b = 1},
    {.conv = ATTND_CONV_TORCH_MHA, /* kdim or vdim given */
     .names = {[Q_W] = "q_proj_weight",
               [K_W] = "k_proj_weight",
               [V_W] = "v_proj_weight",
               [O_W] = "out_proj.weight",
               [Q_B] = "in_proj_bias",
               [O_B] = "out_proj.bias"},
     .fused_b = 1},
    {.conv = ATTND_CONV_BERT,
     .layer = "attention",
     .names = {[Q_W] = "attention.self.query.weight",
               [K_W] = "attention.self.key.weight",
               [V_W] = "attention.self.value.weight",
               [O_W] = "attention.output.dense.weight",
               [Q_B] = "attention.self.query.bias",
               [K_B] = "attention.self.key.bias",
               [V_B] = "attention.self.value.bias",
               [O_B] = "attention.output.dense.bias"}},
    {.conv = ATTND_CONV_LLAMA,
     .layer = "self_attn",
     .names = {[Q_W] = "self_attn.q_proj.weight",
               [K_W] = "self_attn.k_proj.weight",
               [V_W] = "self_attn.v_proj.weight",
               [O_W] = "self_attn.o_proj.weight",
               [Q_B] = "self_attn.q_proj.bias",
               [K_B] = "self_attn.k_proj.bias",
               [V_B] = "self_attn.v_proj.bias",
               [O_B] = "self_attn.o_proj.bias",
               [Q_N] = "self_attn.q_norm.weight",
               [K_N] = "self_attn.k_norm.weight"}},
    {.conv = ATTND_CONV_GPT2,
     .layer = "attn",
     .names = {[Q_W] = "attn.c_attn.weight",
               [O_W] = "attn.c_proj.weight",
               [Q_B] = "attn.c_attn.bias",
               [O_B] = "attn.c_proj.bias"},
     .fused_w = 1,
     .fused_b = 1,
     .transposed = 1},
};
#define N_FORMS (sizeof FORMS / sizeof *FORMS)

/* ---- one layer ----------------------------------------------------------- */

int attnd__layer_fail(build_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int attnd__layer_fail(build_t *b, const char *fmt, ...) {
  int n = snprintf(b->msg, b->msz, "layer '%s' in %s: ", b->l.name, b->file);
  if (n >= 0 && (size_t)n < b->msz) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg + n, b->msz - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static void layer_free(attnd_layer_t *l) {
  const float *bufs[] = {l->q_weight, l->k_weight, l->v_weight, l->o_weight,
                         l->q_bias,   l->k_bias,   l->v_bias,   l->o_bias,
                         l->q_norm,   l->k_norm};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
    free((void *)bufs[i]);
  free((void *)l->name);
  free((void *)l->file);
  memset(l, 0, sizeof *l);
}

static const char *shape_of(const attnd_st_tensor_t *t, char *buf, size_t n) {
  attnd_shape_text(buf, n, t->rank, t->shape, ", ");
  return buf;
}

/* Fails with "tensor 'x' has shape [..], expected <what>". */
int attnd__bad_shape(build_t *b, const entry_t *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int attnd__bad_shape(build_t *b, const entry_t *e, const char *fmt, ...) {
  char want[160], got[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(want, sizeof want, fmt, ap);
  va_end(ap);
  return attnd__layer_fail(b, "tensor '%s' has shape %s, expected %s",
                           e->t->name, shape_of(e->t, got, sizeof got), want);
}

static int check_matrix(build_t *b, const entry_t *e) {
  if (e->t->rank != 2 || e->t->shape[0] < 1 || e->t->shape[1] < 1)
    return attnd__bad_shape(b, e, "a non-empty matrix");
  return 0;
}

/* Finds the parts by name (pass 3) and reads the weights' shapes. */
static int find_parts(build_t *b) {
  const form_t *f = b->form;
  for (int i = 0; i < N_PARTS; i++) {
    b->raw[i] = f->names[i]
                    ? attnd__find_entry(b->src, b->prefix, b->plen, f->names[i])
                    : NULL;
    int required = i == Q_W || i == O_W || (i <= V_W && !f->fused_w);
    if (required && !b->raw[i])
      return attnd__layer_fail(b, "missing tensor '%.*s%s'", (int)b->plen,
                               b->prefix, f->names[i]);
  }
  for (int i = 0; i < N_PARTS; i++) {
    const entry_t *e = b->raw[i];
    if (e && e->t->dtype != ATTND_ST_F32 && e->t->dtype != ATTND_ST_F16 &&
        e->t->dtype != ATTND_ST_BF16 && e->t->dtype != ATTND_ST_F64)
      return attnd__layer_fail(
          b,
          "tensor '%s' is %s, which is not a float32 weight "
          "(F64, F32, F16 or BF16)",
          e->t->name, attnd_st_dtype_name(e->t->dtype));
  }

  /* q, k, v: [out, in], or stacked in one tensor */
  part_t *p = b->part;
  if (f->fused_w) {
    const entry_t *e = b->raw[Q_W];
    if (check_matrix(b, e) < 0)
      return -1;
    int64_t rows = e->t->shape[0], cols = e->t->shape[1];
    int64_t stacked = f->transposed ? cols : rows,
            in = f->transposed ? rows : cols;
    if (stacked != 3 * in)
      return attnd__bad_shape(b, e,
                              f->transposed ? "[E, 3E] (input-major q, k, v)"
                                            : "[3E, E] (q, k, v stacked)");
    for (int i = Q_W; i <= V_W; i++)
      p[i] = (part_t){e, i * in, in, in, f->transposed};
  } else {
    for (int i = Q_W; i <= V_W; i++) {
      const entry_t *e = b->raw[i];
      if (check_matrix(b, e) < 0)
        return -1;
      p[i] = (part_t){e, 0, e->t->shape[0], e->t->shape[1], 0};
    }
  }
  const entry_t *o = b->raw[O_W];
  if (check_matrix(b, o) < 0)
    return -1;
  p[O_W] = (part_t){o, 0, o->t->shape[f->transposed],
                    o->t->shape[!f->transposed], f->transposed};

  /* each projection's in_features: the query's, the key's and the value's
   * widths (kdim and vdim differ from embed_dim in cross-attention) */
  b->l.E = p[Q_W].in;
  b->l.Ek = p[K_W].in;
  b->l.Ev = p[V_W].in;
  return 0;
}

/* Biases ([out], or the three stacked) and norms ([Dh]), once the weights'
 * shapes are known. */
static int check_vectors(build_t *b) {
  part_t *p = b->part;
  const entry_t *e;
  if (b->form->fused_b && (e = b->raw[Q_B])) {
    int64_t n = p[Q_W].out + p[K_W].out + p[V_W].out;
    if (e->t->rank != 1 || e->t->shape[0] != n)
      return attnd__bad_shape(b, e, "[%lld] (q, k and v biases stacked)",
                              (long long)n);
    int64_t first = 0;
    for (int i = 0; i < 3; i++) {
      p[Q_B + i] = (part_t){e, first, p[Q_W + i].out, 1, 0};
      first += p[Q_W + i].out;
    }
  } else {
    for (int i = Q_B; i <= V_B; i++)
      if ((e = b->raw[i]))
        p[i] = (part_t){e, 0, p[i - Q_B].out, 1, 0};
  }
  if ((e = b->raw[O_B]))
    p[O_B] = (part_t){e, 0, p[O_W].out, 1, 0};
  for (int i = Q_N; i <= K_N; i++)
    if ((e = b->raw[i]))
      p[i] = (part_t){e, 0, b->l.Dh, 1, 0};
  for (int i = Q_B; i < N_PARTS; i++) {
    if (!(e = p[i].e) || (i <= V_B && b->form->fused_b))
      continue;
    if (e->t->rank != 1 || e->t->shape[0] != p[i].out)
      return attnd__bad_shape(b, e, "[%lld] (%s)", (long long)p[i].out,
                              i >= Q_N ? "head_dim"
                                       : "the weight's out_features");
  }
  return 0;
}

/* The coordinates of flat index i of t, as "[3, 17]". */
static const char *index_text(const attnd_st_tensor_t *t, int64_t i, char *buf,
                              size_t n) {
  int64_t at[ATTND_ST_MAX_RANK];
  for (int d = t->rank - 1; d >= 0; d--) {
    at[d] = t->shape[d] ? i % t->shape[d] : 0;
    i = t->shape[d] ? i / t->shape[d] : 0;
  }
  attnd_shape_text(buf, n, t->rank, at, ", ");
  return buf;
}

/* Elements a thread converts at a time: the first writes to new pages
 * cost most of a load (weights_alloc), and threads take them in parallel. */
#define CONVERT_CHUNK ((int64_t)1 << 20)

/* Converts elements [off, off + n) of e's tensor into dst, in chunks spread
 * over the CPUs; the first failing element is reported. */
static int convert_range(build_t *b, const entry_t *e, int64_t off, int64_t n,
                         float *dst) {
  size_t dsize = attnd_st_dtype_size(e->t->dtype);
  int64_t chunks = (n + CONVERT_CHUNK - 1) / CONVERT_CHUNK, bad = INT64_MAX;
  int rc = 0;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t c0 = c * CONVERT_CHUNK;
    attnd_st_tensor_t t = *e->t;
    t.data += (size_t)(off + c0) * dsize;
    t.elems = n - c0 < CONVERT_CHUNK ? n - c0 : CONVERT_CHUNK;
    t.bytes = (size_t)t.elems * dsize;
    t.rank = 1;
    t.shape[0] = t.elems;
    int64_t at = 0;
    int r = attnd_st_to_f32(&t, dst + c0, &at);
#pragma omp critical(attnd_convert)
    if (r < 0 && (rc == 0 || (r == -2 && c0 + at < bad))) {
      rc = r;
      bad = r == -2 ? c0 + at : bad;
    }
  }
  char at[160];
  if (rc == -2)
    return attnd__layer_fail(b,
                             "tensor '%s' holds a value that is not finite (or "
                             "beyond float32's range) at %s",
                             e->t->name,
                             index_text(e->t, off + bad, at, sizeof at));
  if (rc < 0)
    return attnd__layer_fail(
        b, "tensor '%s': dtype %s does not convert to float32", e->t->name,
        attnd_st_dtype_name(e->t->dtype));
  return 0;
}

/* A new buffer of n floats, 64-byte aligned. Plain pages: on these VMs
 * the first write to a page is most of a load's time, and advising huge
 * pages (MADV_HUGEPAGE) made it slower, 0.37 against 1.2 GB/s of BF16
 * weights in alternating runs, as the kernel zeroes and compacts 2 MB at
 * a time; neither does populating them ahead (MADV_POPULATE_WRITE) help. */
static float *weights_alloc(size_t n) {
  void *buf;
  return posix_memalign(&buf, 64, n * sizeof(float)) ? NULL : buf;
}

/* Pass 5 for one part: a new float32 [out, in] buffer in *dst. */
static int convert_part(build_t *b, const part_t *p, const float **dst) {
  size_t n = (size_t)(p->out * p->in);
  float *buf = weights_alloc(n);
  if (!buf)
    return attnd__layer_fail(b, "out of memory for tensor '%s'", p->e->t->name);
  *dst = buf;
  b->l.bytes += n * sizeof(float);
  if (!p->transposed)
    return convert_range(b, p->e, p->first * p->in, (int64_t)n, buf);
  /* stored [in, cols]: convert it whole once, then copy columns
   * [first, first + out) out as rows, in 32 × 32 tiles */
  if (b->tmp_e != p->e) {
    free(b->tmp);
    b->tmp_e = NULL;
    if (!(b->tmp = malloc(p->e->t->elems * sizeof(float))))
      return attnd__layer_fail(b, "out of memory for tensor '%s'",
                               p->e->t->name);
    if (convert_range(b, p->e, 0, p->e->t->elems, b->tmp) < 0)
      return -1;
    b->tmp_e = p->e;
  }
  int64_t cols = p->e->t->shape[1];
  float *out = buf;
  for (int64_t i0 = 0; i0 < p->in; i0 += 32)
    for (int64_t o0 = 0; o0 < p->out; o0 += 32)
      for (int64_t i = i0; i < i0 + 32 && i < p->in; i++)
        for (int64_t o = o0; o < o0 + 32 && o < p->out; o++)
          out[o * p->in + i] = b->tmp[i * cols + p->first + o];
  return 0;
}

/* Refusals of what attnd would compute differently: torch's add_bias_kv,
 * BERT's relative positions, GPT-2's and Gemma's attention scales. */
static int check_unsupported(build_t *b) {
  const char *p = b->prefix;
  size_t n = b->plen;
  attnd_convention_t conv = b->form->conv;
  if (conv == ATTND_CONV_TORCH_MHA) {
    if (attnd__find_entry(b->src, p, n, "bias_k") ||
        attnd__find_entry(b->src, p, n, "bias_v"))
      return attnd__layer_fail(
          b, "bias_k / bias_v (add_bias_kv) are not supported");
    if (b->form->fused_w && attnd__find_entry(b->src, p, n, "q_proj_weight"))
      return attnd__layer_fail(b,
                               "both '%.*sin_proj_weight' and "
                               "'%.*sq_proj_weight': one form or the other",
                               (int)n, p, (int)n, p);
  }
  if (conv == ATTND_CONV_BERT &&
      attnd__find_entry(b->src, p, n,
                        "attention.self.distance_embedding.weight"))
    return attnd__layer_fail(b, "relative position embeddings "
                                "(distance_embedding) are not supported");
  json_t *v;
  if (conv == ATTND_CONV_GPT2 &&
      (((v = attnd__config_get(b, "scale_attn_weights")) && json_is_false(v)) ||
       ((v = attnd__config_get(b, "scale_attn_by_inverse_layer_idx")) &&
        json_is_true(v))))
    return attnd__layer_fail(b,
                             "%s: only the scale 1/sqrt(head_dim) is supported "
                             "(scale_attn_weights true, "
                             "scale_attn_by_inverse_layer_idx false)",
                             b->src->config_path);
  if (conv == ATTND_CONV_LLAMA) {
    if (attnd__config_get(b, "attn_logit_softcapping"))
      return attnd__layer_fail(b, "%s: attn_logit_softcapping is not supported",
                               b->src->config_path);
    v = attnd__config_get(b, "query_pre_attn_scalar");
    if (v && json_number_value(v) != (double)b->l.Dh)
      return attnd__layer_fail(b,
                               "%s: query_pre_attn_scalar other than head_dim "
                               "%lld is not supported",
                               b->src->config_path, (long long)b->l.Dh);
    const char *type = json_string_value(attnd__config_get(b, "model_type"));
    if (type && strncmp(type, "gemma", 5) == 0 && (b->raw[Q_N] || b->raw[K_N]))
      return attnd__layer_fail(b,
                               "%s: model_type '%s' scales q_norm/k_norm by "
                               "(1 + weight), which is not supported",
                               b->src->config_path, type);
  }
  return 0;
}

/* Passes 3 to 5 for the layer whose query weight is q in form f. */
static int build_layer(build_t *b) {
  const form_t *f = b->form;
  attnd_layer_t *l = &b->l;
  const entry_t *q = b->q;
  b->file = b->src->files[q->file];
  b->st = &b->src->maps[q->file].file;

  /* the name: p + layer, or for torch_mha p less its '.' (the path's name
   * for an empty p) */
  char *name;
  if (f->layer)
    name = malloc(b->plen + strlen(f->layer) + 1);
  else
    name = b->plen ? strndup(b->prefix, b->plen - 1) : strdup(b->src->unnamed);
  if (name && f->layer) {
    memcpy(name, b->prefix, b->plen);
    strcpy(name + b->plen, f->layer);
  }
  if (!name || !(l->file = strdup(b->file))) {
    free(name);
    return attnd_fail(b->msg, b->msz, "out of memory");
  }
  l->name = name;
  if (!*name)
    return attnd__layer_fail(b, "the layer's name would be empty");
  l->convention = f->conv;
  l->file_dtype = attnd_st_dtype_name(q->t->dtype);

  int llama = f->conv == ATTND_CONV_LLAMA;
  if (find_parts(b) < 0 || attnd__resolve_heads(b) < 0 ||
      check_vectors(b) < 0 || check_unsupported(b) < 0 ||
      attnd__resolve_rope(b, llama) < 0 || attnd__resolve_window(b, llama) < 0)
    return -1;

  double eps = 1e-6;
  int from =
      attnd__param_num(b, llama ? "rms_norm_eps" : NULL, "rms_norm_eps", &eps);
  char where[512];
  if (from < 0)
    return -1;
  if (!(eps >= 0) || eps > 1)
    return attnd__layer_fail(
        b, "%s must be in [0, 1], got %g",
        attnd__param_where(b, from, "rms_norm_eps", where, sizeof where), eps);
  l->norm_eps = (float)eps;

  l->causal = llama || f->conv == ATTND_CONV_GPT2 ? ATTN_CAUSAL_BOTTOM_RIGHT
                                                  : ATTN_CAUSAL_NONE;
  const char *causal = attnd__meta_get(b, "causal");
  if (causal) {
    if (!strcmp(causal, "true") || !strcmp(causal, "bottom_right"))
      l->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    else if (!strcmp(causal, "top_left"))
      l->causal = ATTN_CAUSAL_TOP_LEFT;
    else if (!strcmp(causal, "false") || !strcmp(causal, "none"))
      l->causal = ATTN_CAUSAL_NONE;
    else
      return attnd__layer_fail(
          b,
          "__metadata__ 'causal' is '%s', not true, false, "
          "bottom_right, top_left or none",
          causal);
  }

  const float **dst[N_PARTS] = {
      &l->q_weight, &l->k_weight, &l->v_weight, &l->o_weight, &l->q_bias,
      &l->k_bias,   &l->v_bias,   &l->o_bias,   &l->q_norm,   &l->k_norm};
  for (int i = 0; i < N_PARTS; i++)
    if (b->part[i].e && convert_part(b, &b->part[i], dst[i]) < 0)
      return -1;
  return 0;
}

/* Appends to buf[*len ..), truncating at its size. */
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t size, size_t *len, const char *fmt, ...) {
  if (*len >= size - 1)
    return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (k > 0)
    *len = *len + (size_t)k < size - 1 ? *len + (size_t)k : size - 1;
}

/* Adds the layers of one opened source to the set (pass 3: discovery). */
static int discover(const source_t *s, attnd_layer_set_t *set, char *msg,
                    size_t msz) {
  size_t found = 0;
  for (size_t i = 0; i < s->n_tensors; i++) {
    const char *name = s->tensors[i].t->name;
    for (size_t k = 0; k < N_FORMS; k++) {
      const char *query = FORMS[k].names[Q_W];
      if (!attnd__ends_with(name, query))
        continue;
      size_t plen = strlen(name) - strlen(query);
      if (plen && name[plen - 1] != '.')
        continue;
      if (set->n == set->cap) {
        size_t cap = set->cap ? 2 * set->cap : 16;
        attnd_layer_t *grown = realloc(set->layers, cap * sizeof *grown);
        if (!grown)
          return attnd_fail(msg, msz, "out of memory");
        set->layers = grown;
        set->cap = cap;
      }
      build_t b = {.src = s,
                   .form = &FORMS[k],
                   .q = &s->tensors[i],
                   .prefix = name,
                   .plen = plen,
                   .msg = msg,
                   .msz = msz};
      int rc = build_layer(&b);
      free(b.tmp);
      if (rc < 0) {
        layer_free(&b.l);
        return -1;
      }
      set->layers[set->n++] = b.l;
      set->bytes += b.l.bytes;
      found++;
    }
  }
  if (found)
    return 0;

  char expected[512], seen[512];
  size_t n = 0;
  for (size_t k = 0; k < N_FORMS; k++)
    append(expected, sizeof expected, &n, "%s{p}%s (%s)", k ? ", " : "",
           FORMS[k].names[Q_W], attnd_convention_name(FORMS[k].conv));
  n = 0;
  seen[0] = '\0';
  for (size_t i = 0; i < s->n_tensors && i < 5; i++)
    append(seen, sizeof seen, &n, "%s'%s'", i ? ", " : "",
           s->tensors[i].t->name);
  return attnd_fail(msg, msz,
                    "no attention layer found in %s: expected tensors named "
                    "like %s; it holds %zu tensor%s%s%s%s",
                    s->path, expected, s->n_tensors,
                    s->n_tensors == 1 ? "" : "s", s->n_tensors ? ": " : "",
                    seen, s->n_tensors > 5 ? ", ..." : "");
}

int attnd_layer_cross(const attnd_layer_t *l) {
  return l->Ek != l->E || l->Ev != l->E;
}

/* ---- the set ------------------------------------------------------------- */

/* Gives back the layers' device blocks and what they held of the budget. */
static void set_off_device(attnd_layer_set_t *set) {
  for (size_t i = 0; i < set->n; i++) {
    attnd_layer_t *l = &set->layers[i];
    if (l->gpu.block)
      set->mem.free((void *)l->gpu.block);
    memset(&l->gpu, 0, sizeof l->gpu);
  }
  if (set->budget)
    attnd_budget_give(set->budget, &set->device_held);
}

static void set_free(attnd_layer_set_t *set) {
  if (set->counted) {
    atomic_fetch_sub_explicit(&live_sets, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&live_bytes, set->bytes, memory_order_relaxed);
  }
  if (set->host_budget)
    attnd_budget_scratch(set->host_budget, -(int64_t)set->bytes);
  set_off_device(set);
  for (size_t i = 0; i < set->n; i++)
    layer_free(&set->layers[i]);
  for (size_t i = 0; i < set->n_skips; i++) {
    attnd_layer_skip_t *k = &set->skips[i];
    for (size_t f = 0; f < k->n; f++)
      free((void *)k->files[f]);
    free((void *)k->files);
    free((void *)k->dir);
  }
  free(set->skips);
  free(set->layers);
  free(set);
}

/* Moves the names of the files s left out into the set, for the log. */
static int keep_skipped(source_t *s, attnd_layer_set_t *set, char *msg,
                        size_t msz) {
  if (!s->n_skipped)
    return 0;
  attnd_layer_skip_t *grown =
      realloc(set->skips, (set->n_skips + 1) * sizeof *grown);
  if (!grown)
    return attnd_fail(msg, msz, "out of memory");
  set->skips = grown;
  char *dir = strdup(s->path);
  if (!dir)
    return attnd_fail(msg, msz, "out of memory");
  set->skips[set->n_skips++] =
      (attnd_layer_skip_t){.dir = dir,
                           .by = s->chosen_by,
                           .files = (const char *const *)s->skipped,
                           .n = s->n_skipped};
  s->skipped = NULL;
  s->n_skipped = 0;
  return 0;
}

static int cmp_layer(const void *a, const void *b) {
  return strcmp(((const attnd_layer_t *)a)->name,
                ((const attnd_layer_t *)b)->name);
}

int attnd_layers_load(const char *paths, attnd_layer_set_t **out, char *msg,
                      size_t msz) {
  double t0 = attnd_now_ms();
  *out = NULL;
  attnd_layer_set_t *set = calloc(1, sizeof *set);
  char *list = strdup(paths ? paths : "");
  if (!set || !list) {
    free(set);
    free(list);
    return attnd_fail(msg, msz, "out of memory");
  }
  atomic_init(&set->refs, 1);
  int rc = 0;
  char *save = NULL;
  for (char *item = strtok_r(list, ",", &save); rc == 0 && item;
       item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ' || *item == '\t')
      item++;
    size_t n = strlen(item);
    while (n && (item[n - 1] == ' ' || item[n - 1] == '\t'))
      item[--n] = '\0';
    if (!n)
      continue;
    source_t s = {.path = item};
    rc = attnd__source_open(&s, msg, msz);
    if (rc == 0)
      rc = discover(&s, set, msg, msz);
    if (rc == 0)
      rc = keep_skipped(&s, set, msg, msz);
    attnd__source_close(&s); /* the set keeps float32 copies only */
  }
  if (rc == 0) {
    if (set->n)
      qsort(set->layers, set->n, sizeof *set->layers, cmp_layer);
    for (size_t i = 1; i < set->n && rc == 0; i++)
      if (strcmp(set->layers[i - 1].name, set->layers[i].name) == 0)
        rc = attnd_fail(msg, msz, "layer '%s' found twice: in %s and in %s",
                        set->layers[i].name, set->layers[i - 1].file,
                        set->layers[i].file);
  }
  free(list);
  if (rc < 0) {
    set_free(set);
    return -1;
  }
  set->seconds = (attnd_now_ms() - t0) / 1e3;
  if (set->n) {
    set->counted = 1;
    atomic_fetch_add_explicit(&live_sets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&live_bytes, set->bytes, memory_order_relaxed);
  }
  *out = set;
  return 0;
}

void attnd_layer_sets_alive(size_t *sets, size_t *bytes) {
  *sets = atomic_load_explicit(&live_sets, memory_order_relaxed);
  *bytes = atomic_load_explicit(&live_bytes, memory_order_relaxed);
}

attnd_layer_set_t *attnd_layer_set_ref(attnd_layer_set_t *set) {
  if (set)
    atomic_fetch_add_explicit(&set->refs, 1, memory_order_relaxed);
  return set;
}

void attnd_layer_set_unref(attnd_layer_set_t *set) {
  if (set &&
      atomic_fetch_sub_explicit(&set->refs, 1, memory_order_acq_rel) == 1)
    set_free(set);
}

void attnd_layer_set_charge(attnd_layer_set_t *set, attnd_budget_t *budget) {
  if (!set || set->host_budget)
    return;
  set->host_budget = budget;
  attnd_budget_scratch(budget, (int64_t)set->bytes);
}

size_t attnd_layer_set_count(const attnd_layer_set_t *set) {
  return set ? set->n : 0;
}

const attnd_layer_t *attnd_layer_set_get(const attnd_layer_set_t *set,
                                         size_t i) {
  return set && i < set->n ? &set->layers[i] : NULL;
}

const attnd_layer_t *attnd_layer_set_find(const attnd_layer_set_t *set,
                                          const char *name) {
  if (!set || !set->n || !name)
    return NULL;
  attnd_layer_t key = {.name = name};
  return bsearch(&key, set->layers, set->n, sizeof *set->layers, cmp_layer);
}

size_t attnd_layer_set_bytes(const attnd_layer_set_t *set) {
  return set ? set->bytes : 0;
}

double attnd_layer_set_load_seconds(const attnd_layer_set_t *set) {
  return set ? set->seconds : 0;
}

size_t attnd_layer_set_skip_count(const attnd_layer_set_t *set) {
  return set ? set->n_skips : 0;
}

const attnd_layer_skip_t *attnd_layer_set_skip(const attnd_layer_set_t *set,
                                               size_t i) {
  return set && i < set->n_skips ? &set->skips[i] : NULL;
}

/* ---- on the device ------------------------------------------------------- */

#define DEVICE_ALIGN 256 /* each tensor's start in a layer's block */

/* bytes rounded up to DEVICE_ALIGN: a tensor's room in the block */
static size_t device_room(size_t bytes) {
  return (bytes + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
}

/* The eight tensors that weights_on_device covers: the host's, where
 * their device copies go (the weights' bfloat16 ones in a bf16 set), and
 * their element counts. */
typedef struct {
  const float *host[8];
  const void **dev[8];
  size_t n[8];
} layer_tensors_t;

static layer_tensors_t tensors_of(attnd_layer_t *l, int bf16) {
  int64_t qo = l->H * l->Dh, ko = l->Hkv * l->Dh, vo = l->Hkv * l->Dv;
  layer_tensors_t t = {
      .host = {l->q_weight, l->k_weight, l->v_weight, l->o_weight, l->q_bias,
               l->k_bias, l->v_bias, l->o_bias},
      .dev = {(const void **)&l->gpu.q_weight, (const void **)&l->gpu.k_weight,
              (const void **)&l->gpu.v_weight, (const void **)&l->gpu.o_weight,
              (const void **)&l->gpu.q_bias, (const void **)&l->gpu.k_bias,
              (const void **)&l->gpu.v_bias, (const void **)&l->gpu.o_bias},
      .n = {(size_t)(qo * l->E), (size_t)(ko * l->Ek), (size_t)(vo * l->Ev),
            (size_t)(l->Eo * l->H * l->Dv), (size_t)qo, (size_t)ko, (size_t)vo,
            (size_t)l->Eo}};
  if (bf16)
    for (int i = 0; i < 4; i++)
      t.dev[i] = &l->gpu.weight16[i];
  return t;
}

/* Tensor i's bytes on the device: bfloat16 weights in a bf16 set. */
static size_t tensor_bytes(const layer_tensors_t *t, int i, int bf16) {
  return t->n[i] * (bf16 && i < 4 ? 2 : sizeof(float));
}

/* The bytes of l's device block: its tensors, each from a DEVICE_ALIGN
 * boundary. */
static size_t block_bytes(attnd_layer_t *l, int bf16) {
  layer_tensors_t t = tensors_of(l, bf16);
  size_t bytes = 0;
  for (int i = 0; i < 8; i++)
    if (t.host[i])
      bytes += device_room(tensor_bytes(&t, i, bf16));
  return bytes;
}

/* Copies l's tensors into a new block: 0, or -1 (nothing left). A bf16
 * set's weights are rounded here (to nearest, ties to even: the cuda
 * backend's own rounding), through `tmp`, room for the largest. */
static int layer_to_device(attnd_layer_set_t *set, attnd_layer_t *l,
                           uint16_t *tmp) {
  const int bf16 = set->device_bf16;
  layer_tensors_t t = tensors_of(l, bf16);
  char *block = set->mem.alloc(block_bytes(l, bf16));
  if (block == NULL)
    return -1;
  l->gpu.block = block;
  size_t at = 0;
  for (int i = 0; i < 8; i++) {
    if (!t.host[i])
      continue;
    const void *src = t.host[i];
    if (bf16 && i < 4) {
      for (size_t e = 0; e < t.n[i]; e++)
        tmp[e] = attnd_bf16_from_f32(t.host[i][e]);
      src = tmp;
    }
    size_t bytes = tensor_bytes(&t, i, bf16);
    if (set->mem.copy(block + at, src, bytes) < 0) {
      set->mem.free(block);
      memset(&l->gpu, 0, sizeof l->gpu);
      return -1;
    }
    *t.dev[i] = block + at;
    at += device_room(bytes);
  }
  return 0;
}

int attnd_layer_set_to_device(attnd_layer_set_t *set,
                              const attnd_device_memory_t *mem, int bf16,
                              attnd_budget_t *budget, char *msg, size_t msz) {
  int64_t need = 0;
  size_t most = 0; /* the largest weight, for a bf16 set's rounding */
  for (size_t i = 0; i < set->n; i++) {
    attnd_layer_t *l = &set->layers[i];
    need += (int64_t)block_bytes(l, bf16);
    layer_tensors_t t = tensors_of(l, bf16);
    for (int w = 0; w < 4; w++)
      most = t.n[w] > most ? t.n[w] : most;
  }
  set->mem = *mem;
  set->budget = budget;
  set->device_bf16 = bf16;
  if (attnd_budget_take(budget, need, &set->device_held) < 0)
    return attnd_fail(msg, msz,
                      "the %zu layers' weights need %lld bytes of GPU memory "
                      "(%s), and %lld of the %lld that "
                      "max_device_memory_bytes gives are in use",
                      set->n, (long long)need, bf16 ? "bf16" : "fp32",
                      (long long)attnd_budget_used(budget),
                      (long long)budget->max);
  uint16_t *tmp = bf16 ? malloc(most * 2 + 2) : NULL;
  if (bf16 && tmp == NULL) {
    attnd_budget_give(budget, &set->device_held);
    return attnd_fail(msg, msz, "out of memory");
  }
  for (size_t i = 0; i < set->n; i++)
    if (layer_to_device(set, &set->layers[i], tmp) < 0) {
      free(tmp);
      set_off_device(set);
      return attnd_fail(msg, msz,
                        "copying layer '%s' (%zu bytes) to the GPU failed: "
                        "out of device memory, or the device failed",
                        set->layers[i].name,
                        block_bytes(&set->layers[i], bf16));
    }
  free(tmp);
  return 0;
}

int64_t attnd_layer_set_device_bytes(const attnd_layer_set_t *set) {
  return set ? set->device_held : 0;
}
