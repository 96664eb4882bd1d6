/* tests/doc_names.h: a list of names that the code holds (the members a
 * decoder reads, a protocol's parameters) against the documents that
 * describe it, so that a name added to one and not the other fails,
 * naming the missing piece. Each fails the calling Check test. */
#ifndef ATTND_TESTS_DOC_NAMES_H
#define ATTND_TESTS_DOC_NAMES_H

/* The names in backquotes in the first column of the first table under
 * the line `heading` of the markdown file `doc` that are members of
 * `object` ("" for a request's root, "mask." for its mask: `mask.causal`
 * is the root's mask and the mask's causal) are exactly `names`
 * (NULL-terminated); `owner` says where `names` live, for the messages. */
void dn_table_is(const char *doc, const char *heading, const char *object,
                 const char *const *names, const char *owner);

/* The names that the row of the first table under `heading` in `doc`
 * whose first cell is `row` in backquotes gives the members of that
 * object, in the cells after the first, are exactly `names`: with `keys`,
 * the keys of the JSON objects written in backquotes there
 * (`{"left": n, "right": n}`, or `{"type": "linear", "factor"}` where a
 * key has no value), each at its object's top level alone; without, the
 * names in backquotes (`q_weight`). */
void dn_row_is(const char *doc, const char *heading, const char *row, int keys,
               const char *const *names, const char *owner);

/* The properties of components.schemas.`schema` in docs/openapi.json are
 * exactly `names`; "Mask.window" is the properties of Mask's property
 * window, and "FlatTensor+Base64Tensor" those of either schema. */
void dn_schema_is(const char *schema, const char *const *names,
                  const char *owner);

/* The keys of the JSON objects in backquotes in the bulleted list that
 * follows the first line of `doc` that starts with `from` (as dn_row_is
 * reads them) are exactly `names`, the members of `object` (for the
 * messages). */
void dn_list_keys_are(const char *doc, const char *from, const char *object,
                      const char *const *names, const char *owner);

/* Each of `names` is written in quotes in backquotes, as a member of a
 * JSON object is (`{"layer": name}`, `"ttl_s"?`), in the first line of
 * `doc` that starts with `line` (a table's row). */
void dn_line_quotes(const char *doc, const char *line, const char *const *names,
                    const char *owner);

/* The keys of the JSON objects in backquotes in the first line of `doc`
 * that starts with `line` (a table's row), read as dn_row_is reads them,
 * are exactly `names`. */
void dn_line_keys_are(const char *doc, const char *line,
                      const char *const *names, const char *owner);

/* Each of `names` is in backquotes, as a member of `object` (as above),
 * in the bulleted list that follows the first line of `doc` that starts
 * with `from`. */
void dn_list_has(const char *doc, const char *from, const char *object,
                 const char *const *names, const char *owner);

#endif
