/* server/api/decode_parse.c: a body's JSON text to jansson's tree, for
 * /v1, session steps and OIP (decode.h): parsed in a per-thread arena,
 * with an allocator that turns jansson's silent failures into
 * out_of_memory; and where a malformed array of numbers fails, found
 * without reading its numbers (attnd__dec_fault). HTTP thread. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/decode.h"
#include "codec/arena.h"
#include "codec/mem.h"
#include "codec/util.h"

/* Any JSON value is a valid text (RFC 8259); a request that is not an
 * object is a 422 of its own. */
#define PARSE_FLAGS (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)

/* Parsing under memory pressure.
 *
 * jansson 2.14's parser does not report running out of memory as such: a
 * failed allocation becomes "invalid token" or an error with no text (so a
 * valid body would get invalid_json), a failed growth of the buffer of the
 * token being read drops that byte silently (the body parses to other
 * values), and when the dropped byte is the one after a number, jansson's
 * own assertion aborts the process. So attnd gives jansson an allocator of
 * its own (installed before main, while the process has one thread). While
 * a parse runs on the thread, a failed malloc is noted and served instead
 * from a small reserve on the parsing thread's stack, and the text ends:
 * jansson reads it PARSE_CHUNK bytes at a time, and after a failure its next
 * read finds the end of the input. jansson then stops within a few values
 * without seeing a failure, and the caller answers out_of_memory. (Only a
 * number of thousands of digits, being read at the failure, could still
 * run the reserve dry.) */

#define PARSE_CHUNK 64
#define PARSE_RESERVE 16384

typedef struct parse {
  const char *text; /* text[0..len), then more[0..more_len) */
  size_t len, at;
  const char *more;
  size_t more_len;
  int failed;    /* an allocation failed: the tree is not to be trusted */
  char *reserve; /* PARSE_RESERVE bytes, on the parsing thread's stack */
  size_t used;
} parse_t;

static _Thread_local parse_t *parsing; /* this thread's parse, or NULL */

/* Between attnd__dec_tree_begin and _end, this thread's jansson values are
 * taken from its tree arena first (TREE_ARENA bytes; the heap beyond), and
 * freeing one there does nothing: a small body's tree costs no malloc. */
#define TREE_ARENA 32768
static _Thread_local _Alignas(
    ATTND_ARENA_ALIGN) unsigned char tree_mem[TREE_ARENA];
static _Thread_local attnd_arena_t tree;
static _Thread_local int tree_open;

void attnd__dec_tree_begin(void) {
  if (tree.base == NULL)
    attnd_arena_init(&tree, tree_mem, sizeof tree_mem);
  tree_open = attnd__arenas;
}

void attnd__dec_tree_end(void) {
  tree_open = 0;
  attnd_arena_reset(&tree);
}

/* The memory budget's count of what decoding allocates (decode.h,
 * attnd__dec_meter_begin): this thread's meter (codec/mem.h) takes into
 * the request's share, and notes what the share would have needed when
 * the budget had no room. */
typedef struct share {
  attnd_budget_t *budget;
  int64_t *held;
  int64_t need;
} share_t;
static _Thread_local share_t share;
static _Thread_local attnd_meter_t meter;

static int share_take(void *ctx, int64_t bytes) {
  share_t *sh = ctx;
  if (attnd_budget_take(sh->budget, bytes, sh->held) == 0)
    return 0;
  if (*sh->held + bytes > sh->need)
    sh->need = *sh->held + bytes;
  return -1;
}

void attnd__dec_meter_begin(attnd_budget_t *b, int64_t *held) {
  share = (share_t){.budget = b, .held = held};
  meter = (attnd_meter_t){.take = share_take, .ctx = &share};
  attnd_meter_set(&meter);
}

int64_t attnd__dec_meter_end(void) {
  attnd_meter_set(NULL);
  return share.need;
}

static void *json_alloc(size_t n) {
  void *p = tree_open ? attnd_arena_alloc(&tree, n) : NULL;
  if (p)
    return p;
  p = attnd_mem_alloc(n);
  parse_t *ps = parsing;
  if (p || ps == NULL)
    return p;
  ps->failed = 1;
  size_t need = (n + 15) / 16 * 16;
  if (need < n || need > PARSE_RESERVE - ps->used)
    return NULL;
  p = ps->reserve + ps->used;
  ps->used += need;
  return p;
}

static void json_release(void *p) {
  if (attnd_arena_owns(&tree, p))
    return; /* the arena goes with attnd__dec_tree_end */
  parse_t *ps = parsing;
  if (ps && (uintptr_t)p >= (uintptr_t)ps->reserve &&
      (uintptr_t)p < (uintptr_t)ps->reserve + PARSE_RESERVE)
    return; /* the reserve goes with the parse */
  attnd_mem_free(p);
}

__attribute__((constructor)) static void json_alloc_install(void) {
  json_set_alloc_funcs(json_alloc, json_release);
}

static size_t parse_read(void *buf, size_t cap, void *arg) {
  parse_t *ps = arg;
  if (ps->at == ps->len && ps->more) { /* the second piece */
    ps->text = ps->more, ps->len = ps->more_len, ps->at = 0;
    ps->more = NULL;
  }
  size_t n = ps->failed ? 0 : ps->len - ps->at;
  n = n < cap ? n : cap;
  n = n < PARSE_CHUNK ? n : PARSE_CHUNK;
  memcpy(buf, ps->text + ps->at, n);
  ps->at += n;
  return n;
}

/* jansson's tree of text[0..len) followed by more[0..more_len) (one
 * parse): a new reference, or NULL with *oom set when memory ran out, or
 * else jansson's error in `je`. */
static json_t *parse_two(const char *text, size_t len, const char *more,
                         size_t more_len, json_error_t *je, int *oom) {
  _Alignas(16) char reserve[PARSE_RESERVE];
  parse_t ps = {.text = text,
                .len = len,
                .more = more,
                .more_len = more_len,
                .reserve = reserve};
  parsing = &ps;
  json_t *root = json_load_callback(parse_read, &ps, PARSE_FLAGS, je);
  if (ps.failed) { /* freed while the reserve is still known */
    json_decref(root);
    root = NULL;
  }
  parsing = NULL;
  *oom = ps.failed;
  return root;
}

static json_t *parse_once(const char *text, size_t len, json_error_t *je,
                          int *oom) {
  return parse_two(text, len, NULL, 0, je, oom);
}

static void json_line_column(const char *text, size_t pos, int *line,
                             int *column);

/* No JSON text holds a NUL byte, but jansson loses one that it reads past
 * after a number (`{"a":1<NUL>}` reads as `{"a":1}`), and says "end of
 * file expected near end of file" of one after the text. The first NUL of
 * text[0..len), when jansson's own error (if any) is not before it: the
 * error there, in `je` as jansson places its own (the byte read), and 1;
 * else 0. An error at the end of the input comes after every NUL, though
 * its position may be the NUL's own when jansson lost it (`[1<NUL>`). */
static int nul_error(const char *text, size_t len, json_t *root,
                     json_error_t *je) {
  const char *nul = memchr(text, '\0', len);
  if (nul == NULL || (root == NULL && je->position >= 0 &&
                      (size_t)je->position <= (size_t)(nul - text) &&
                      json_error_code(je) != json_error_premature_end_of_input))
    return 0;
  size_t at = (size_t)(nul - text);
  memset(je, 0, sizeof *je);
  json_line_column(text, at + 1, &je->line, &je->column);
  je->position = (int)(at < INT32_MAX ? at + 1 : INT32_MAX);
  snprintf(je->text, sizeof je->text - 1,
           "a NUL byte (byte %zu), which no JSON text holds", at);
  return 1;
}

/* jansson's tree of text[0..len), as parse_once, where the number literals
 * jansson refuses though they are valid JSON (an integer beyond int64, a
 * value beyond a double; both its json_error_numeric_overflow) read as
 * numbers: on that error the text is parsed again with those literals
 * rewritten (bulk.h, attnd_json_widen_numbers) at the same line and
 * column, so that any other error reads the same; and a NUL byte an error
 * at its place (nul_error). */
json_t *attnd__dec_parse(const char *text, size_t len, json_error_t *je,
                         int *oom) {
  json_t *root = parse_once(text, len, je, oom);
  if (!root && !*oom && json_error_code(je) == json_error_numeric_overflow) {
    attnd_buf_t wide;
    attnd_buf_init(&wide);
    long widened = attnd_json_widen_numbers(text, len, &wide);
    if (widened < 0)
      *oom = 1;
    else if (widened > 0)
      root = parse_once(wide.data, wide.len, je, oom);
    attnd_buf_free(&wide);
  }
  if (!*oom && nul_error(text, len, root, je)) {
    json_decref(root);
    root = NULL;
  }
  return root;
}

/* jansson's line and column at byte `pos` of text: lines from 1, columns
 * from 0 counting the bytes that start a UTF-8 character since the last
 * newline, as jansson's stream counts them (its utf8_check_first). */
static void json_line_column(const char *text, size_t pos, int *line,
                             int *column) {
  const char *p = text, *end = text + pos, *nl;
  int l = 1, c = 0;
  while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL)
    l++, p = nl + 1;
  for (; p < end; p++) {
    unsigned char u = (unsigned char)*p;
    c += u < 0x80 || (u >= 0xc2 && u <= 0xf4);
  }
  *line = l;
  *column = c;
}

int attnd__dec_fault(const char *body, size_t len, const attnd_bulk_set_t *bulk,
                     const attnd_buf_t *skel, int64_t max_structure,
                     json_error_t *je, int *oom) {
  if (bulk->fault == SIZE_MAX)
    return 0;
  /* jansson reads the structure before the array and at most the rest of
   * the budget from the error on; an error past that is not known here */
  size_t before = bulk->fault_array - bulk->fault_lifted;
  if (max_structure < 0 || before > (uint64_t)max_structure)
    return 0;
  size_t room = (size_t)((uint64_t)max_structure - before);
  size_t rest = len - bulk->fault < room ? len - bulk->fault : room;
  /* jansson loses a NUL byte that it reads past and puts back (after a
   * number), and its count of lines and columns with it: then the body's
   * bytes no longer say where jansson stands */
  if (memchr(body, '\0', bulk->fault + rest) != NULL)
    return 0;
  attnd_buf_t head;
  attnd_buf_init(&head);
  attnd_buf_append(&head, skel->data, bulk->fault_skel);
  /* a space after it: jansson's lexer reads past the filler's last 0 to
   * the space, not into the token, as the body's ',' '[' or ']' before it
   * leave the lexer (a byte that is no UTF-8 there reads "near '0'") */
  attnd_buf_puts(&head, bulk->fault_fill);
  attnd_buf_puts(&head, " ");
  if (head.oom) {
    attnd_buf_free(&head);
    return (*oom = 1, -1);
  }
  /* as attnd__dec_parse reads the body: again with the literals jansson
   * refuses widened, when jansson refuses one (straight away when one was
   * a leaf before the error, which the filler hides from it) */
  json_t *root = NULL;
  int wide = bulk->fault_wide;
  if (!wide) {
    root = parse_two(head.data, head.len, body + bulk->fault, rest, je, oom);
    wide = !root && !*oom &&
           json_error_code(je) == json_error_numeric_overflow &&
           je->position >= 0 && (size_t)je->position >= head.len;
  }
  if (wide && !root && !*oom) {
    attnd_buf_t w;
    attnd_buf_init(&w);
    if (attnd_json_widen_numbers(body + bulk->fault, rest, &w) < 0)
      *oom = 1;
    else
      root = parse_two(head.data, head.len, w.data, w.len, je, oom);
    attnd_buf_free(&w);
  }
  size_t at = head.len, pos = (size_t)je->position;
  attnd_buf_free(&head);
  if (root || *oom) {
    json_decref(root);
    return *oom ? -1 : 0;
  }
  /* an error before the array is the skeleton's (the body's may read
   * otherwise), as is one about a literal there; an error where the text
   * was cut may be no error */
  if (je->position < 0 || pos < at ||
      json_error_code(je) == json_error_numeric_overflow ||
      (rest < len - bulk->fault && pos >= at + rest))
    return 0;
  pos = bulk->fault + (pos - at);
  json_line_column(body, pos, &je->line, &je->column);
  je->position = (int)pos;
  return 1;
}

_Thread_local uint64_t attnd__decode_slow_runs;

/* A 53-bit nonce for the bulk scanner's placeholders, from a per-thread
 * generator seeded once from the OS. */
uint64_t attnd__dec_nonce(void) {
  static _Thread_local uint64_t state;
  if (state == 0)
    state = attnd_random_u64() | 1;
  return attnd_splitmix64(&state) >> 11;
}
