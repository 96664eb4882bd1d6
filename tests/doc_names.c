/* tests/doc_names.c: see doc_names.h. */
#include "doc_names.h"

#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

enum { DN_MAX = 128, DN_LEN = 64 };

/* The names a document gives, each once. */
typedef struct dn_set {
  char v[DN_MAX][DN_LEN];
  int n;
} dn_set_t;

static int set_has(const dn_set_t *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->v[i], name) == 0)
      return 1;
  return 0;
}

static int list_has(const char *const *names, const char *name) {
  for (; *names; names++)
    if (strcmp(*names, name) == 0)
      return 1;
  return 0;
}

/* Adds to s the names in backquotes in [p, end) that are members of
 * `object` (a dotted path with its final '.', or "" for the root), each
 * by its name there: `mask.causal` is mask in the root and causal in
 * "mask.". What is not a name, such as a value in quotes (`"half"`), is
 * passed over. */
static void scan(dn_set_t *s, const char *p, const char *end,
                 const char *object) {
  size_t skip = strlen(object);
  for (;;) {
    const char *open = memchr(p, '`', (size_t)(end - p));
    if (open == NULL)
      return;
    const char *close = memchr(open + 1, '`', (size_t)(end - open - 1));
    if (close == NULL)
      return;
    const char *t = open + 1;
    size_t len = (size_t)(close - t);
    int name = len > skip && strncmp(t, object, skip) == 0 &&
               ((t[skip] >= 'a' && t[skip] <= 'z') || t[skip] == '_');
    for (size_t i = 0; i < len && name; i++)
      name = (t[i] >= 'a' && t[i] <= 'z') || (t[i] >= '0' && t[i] <= '9') ||
             t[i] == '_' || t[i] == '.';
    if (name) {
      size_t n = strcspn(t + skip, ".`");
      char member[DN_LEN];
      ck_assert_msg(n < DN_LEN && s->n < DN_MAX, "too many or too long "
                                                 "names in backquotes");
      memcpy(member, t + skip, n);
      member[n] = 0;
      if (!set_has(s, member))
        strcpy(s->v[s->n++], member);
    }
    p = close + 1;
  }
}

/* Fails unless s holds exactly `names`, naming the first that one has and
 * the other lacks: `place` is where s was read, `object` what the names
 * are members of, `add` what to do where the place lacks one. */
static void same_names(const dn_set_t *s, const char *const *names,
                       const char *owner, const char *place, const char *object,
                       const char *add) {
  for (const char *const *n = names; *n; n++)
    ck_assert_msg(set_has(s, *n),
                  "%s has %s, which %s does not name as %s%s: %s", owner, *n,
                  place, object, *n, add);
  for (int i = 0; i < s->n; i++)
    ck_assert_msg(list_has(names, s->v[i]),
                  "%s names %s%s, which %s does not have", place, object,
                  s->v[i], owner);
}

/* The first line of text that starts with `start`, or NULL. */
static const char *line_starting(const char *text, const char *start) {
  size_t n = strlen(start);
  for (const char *l = text; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (strncmp(l, start, n) == 0)
      return l;
  return NULL;
}

/* Reads doc, whose text it returns (malloc'd), and sets *at to the first
 * line that starts with `what` after the first that starts with `from`;
 * fails where there is none. */
static char *read_at(const char *doc, const char *from, const char *what,
                     const char **at) {
  char *text = tu_read_file_or_fail(doc, NULL);
  *at = line_starting(text, from);
  ck_assert_msg(*at != NULL, "%s has no line '%s'", doc, from);
  *at = line_starting(*at, what);
  ck_assert_msg(*at != NULL, "%s has no line starting '%s' after '%s'", doc,
                what, from);
  return text;
}

void dn_table_is(const char *doc, const char *heading, const char *object,
                 const char *const *names, const char *owner) {
  const char *at;
  char *text = read_at(doc, heading, "|", &at);
  static dn_set_t s;
  s.n = 0;
  /* the header row and the |---| row, then the rows while they last */
  for (int row = 0; at && *at == '|'; row++) {
    const char *eol = strchr(at, '\n');
    if (eol == NULL)
      eol = at + strlen(at);
    const char *cell_end = memchr(at + 1, '|', (size_t)(eol - at - 1));
    if (row >= 2)
      scan(&s, at + 1, cell_end ? cell_end : eol, object);
    at = *eol ? eol + 1 : NULL;
  }
  char place[256];
  snprintf(place, sizeof place, "the table under '%s' in %s", heading, doc);
  same_names(&s, names, owner, place, object, "add its row there");
  free(text);
}

/* Adds to s the keys at the top level of the JSON object that starts at
 * p ('{'), up to its end or end: a quoted name where a key stands, after
 * '{' or ','. Values, quoted or not, and what nested objects and arrays
 * hold are passed over. */
static void scan_keys(dn_set_t *s, const char *p, const char *end) {
  int depth = 0;
  char prev = 0;
  for (; p < end; p++) {
    if (*p == ' ')
      continue;
    if (*p == '"') {
      const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
      if (q == NULL)
        return;
      if (depth == 1 && (prev == '{' || prev == ',')) {
        size_t n = (size_t)(q - p - 1);
        ck_assert_msg(n < DN_LEN && s->n < DN_MAX, "too many or too long "
                                                   "keys in backquotes");
        char key[DN_LEN];
        memcpy(key, p + 1, n);
        key[n] = 0;
        if (!set_has(s, key))
          strcpy(s->v[s->n++], key);
      }
      p = q;
      prev = '"';
      continue;
    }
    if (*p == '{' || *p == '[')
      depth++;
    else if ((*p == '}' || *p == ']') && --depth == 0)
      return;
    prev = *p;
  }
}

/* Adds to s the keys of the JSON objects in backquotes in [p, end). */
static void scan_snippets(dn_set_t *s, const char *p, const char *end) {
  for (const char *open = p; open < end; open++) {
    const char *close = memchr(open + 1, '`', (size_t)(end - open - 1));
    if (*open != '`' || close == NULL)
      continue;
    if (open[1] == '{')
      scan_keys(s, open + 1, close);
    open = close;
  }
}

void dn_row_is(const char *doc, const char *heading, const char *row, int keys,
               const char *const *names, const char *owner) {
  const char *at;
  char *text = read_at(doc, heading, "|", &at);
  char first[DN_LEN + 8];
  snprintf(first, sizeof first, "| `%s` |", row);
  const char *line = NULL;
  for (; at && *at == '|' && line == NULL;
       at = strchr(at, '\n'), at = at ? at + 1 : NULL)
    if (strncmp(at, first, strlen(first)) == 0)
      line = at;
  ck_assert_msg(line != NULL, "the table under '%s' in %s has no row %s",
                heading, doc, row);
  const char *p = line + strlen(first), *eol = strchr(p, '\n');
  if (eol == NULL)
    eol = p + strlen(p);
  static dn_set_t s;
  s.n = 0;
  if (keys)
    scan_snippets(&s, p, eol);
  else
    scan(&s, p, eol, "");
  char place[256], object[DN_LEN + 1];
  snprintf(place, sizeof place, "the row %s of the table under '%s' in %s", row,
           heading, doc);
  snprintf(object, sizeof object, "%s.", row);
  same_names(&s, names, owner, place, object, "add it there");
  free(text);
}

void dn_schema_is(const char *schema, const char *const *names,
                  const char *owner) {
  json_error_t je;
  json_t *doc = json_load_file("docs/openapi.json", 0, &je);
  ck_assert_msg(doc != NULL, "docs/openapi.json: %s", je.text);
  json_t *schemas =
      json_object_get(json_object_get(doc, "components"), "schemas");
  static dn_set_t s;
  s.n = 0;
  char path[DN_LEN * 2];
  snprintf(path, sizeof path, "%s", schema);
  for (char *alt = path, *next; alt; alt = next) {
    next = strchr(alt, '+');
    if (next)
      *next++ = 0;
    json_t *props = schemas;
    for (char *part = alt, *dot; part; part = dot) {
      dot = strchr(part, '.');
      if (dot)
        *dot++ = 0;
      props = json_object_get(json_object_get(props, part), "properties");
    }
    ck_assert_msg(json_is_object(props),
                  "docs/openapi.json has no components.schemas.%s's "
                  "properties",
                  schema);
    const char *key;
    json_t *v;
    json_object_foreach(props, key, v) {
      ck_assert_msg(strlen(key) < DN_LEN && s.n < DN_MAX,
                    "too many or too long properties in %s", schema);
      if (!set_has(&s, key))
        strcpy(s.v[s.n++], key);
    }
  }
  char place[128];
  snprintf(place, sizeof place, "docs/openapi.json's %s", schema);
  same_names(&s, names, owner, place, "", "add it to its properties");
  json_decref(doc);
}

/* Sets s to the names in the bulleted list that follows the first line of
 * doc that starts with `from`: the keys of its JSON objects in backquotes
 * (with `keys`) or its names in backquotes that are members of object. */
static void read_list(dn_set_t *s, const char *doc, const char *from,
                      const char *object, int keys) {
  const char *at;
  char *text = read_at(doc, from, "- ", &at);
  const char *end = strstr(at, "\n\n");
  if (end == NULL)
    end = at + strlen(at);
  s->n = 0;
  if (keys)
    scan_snippets(s, at, end);
  else
    scan(s, at, end, object);
  free(text);
}

void dn_list_keys_are(const char *doc, const char *from, const char *object,
                      const char *const *names, const char *owner) {
  static dn_set_t s;
  read_list(&s, doc, from, object, 1);
  char place[256];
  snprintf(place, sizeof place, "the list after '%s' in %s", from, doc);
  same_names(&s, names, owner, place, object, "add it there");
}

void dn_list_has(const char *doc, const char *from, const char *object,
                 const char *const *names, const char *owner) {
  static dn_set_t s;
  read_list(&s, doc, from, object, 0);
  for (const char *const *n = names; *n; n++)
    ck_assert_msg(set_has(&s, *n),
                  "%s has %s, which the list after '%s' in %s does not "
                  "name as %s%s: add it there",
                  owner, *n, from, doc, object, *n);
}

void dn_line_quotes(const char *doc, const char *line, const char *const *names,
                    const char *owner) {
  char *text = tu_read_file_or_fail(doc, NULL);
  const char *at = line_starting(text, line);
  ck_assert_msg(at != NULL, "%s has no line '%s'", doc, line);
  const char *eol = strchr(at, '\n');
  size_t len = eol ? (size_t)(eol - at) : strlen(at);
  static dn_set_t s;
  s.n = 0;
  for (const char *open = memchr(at, '`', len); open;) {
    const char *close = memchr(open + 1, '`', (size_t)(at + len - open - 1));
    if (close == NULL)
      break;
    for (const char *q = memchr(open, '"', (size_t)(close - open)); q;) {
      const char *e = memchr(q + 1, '"', (size_t)(close - q - 1));
      if (e == NULL)
        break;
      ck_assert_msg(e - q - 1 < DN_LEN && s.n < DN_MAX,
                    "too many or too long quoted names in %s", doc);
      memcpy(s.v[s.n], q + 1, (size_t)(e - q - 1));
      s.v[s.n++][e - q - 1] = 0;
      q = memchr(e + 1, '"', (size_t)(close - e - 1));
    }
    open = memchr(close + 1, '`', (size_t)(at + len - close - 1));
  }
  for (const char *const *n = names; *n; n++)
    ck_assert_msg(set_has(&s, *n),
                  "%s has %s, which the line '%s' in %s does not write as "
                  "\"%s\": add it there",
                  owner, *n, line, doc, *n);
  free(text);
}

void dn_line_keys_are(const char *doc, const char *line,
                      const char *const *names, const char *owner) {
  char *text = tu_read_file_or_fail(doc, NULL);
  const char *at = line_starting(text, line);
  ck_assert_msg(at != NULL, "%s has no line '%s'", doc, line);
  const char *eol = strchr(at, '\n');
  static dn_set_t s;
  s.n = 0;
  scan_snippets(&s, at, eol ? eol : at + strlen(at));
  char place[256];
  snprintf(place, sizeof place, "the line '%s' in %s", line, doc);
  same_names(&s, names, owner, place, "", "add it there");
  free(text);
}
