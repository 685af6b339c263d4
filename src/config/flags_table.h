/* Internal to config/flags*.c and config/config_*.c: the flag table's types. One row per flag:
 * what it is called, where its value goes in mg_config (key == NULL: nowhere) and whether this
 * build implements it. Subcommands declare rows of the same type pointing into their own
 * argument structs (config/flags_command.h). Exports: mg_flag_spec, mg_flag_table, mg_flag_count,
 * mg_flag_find, mg_flag_field, mg_flag_status_tag. Needs: megatron.h. */
#ifndef MG_FLAGS_TABLE_H
#define MG_FLAGS_TABLE_H

#include "megatron.h"

#include <stddef.h>

#define MG_FLAG_MAX 320 /* capacity of per-flag arrays; flags_table.c asserts the table fits */

typedef enum {
    MG_FLAG_GROUP_MODEL = 0,
    MG_FLAG_GROUP_MOE,       /* mixture of experts */
    MG_FLAG_GROUP_OPTIMIZER, /* regularisation and optimizer */
    MG_FLAG_GROUP_LR,
    MG_FLAG_GROUP_TRAINING,
    MG_FLAG_GROUP_LOGGING,
    MG_FLAG_GROUP_CHECKPOINT,
    MG_FLAG_GROUP_DATA,
    MG_FLAG_GROUP_RUNTIME,
    MG_FLAG_GROUP_GRAPHS, /* CUDA graphs */
    MG_FLAG_GROUP_COUNT
} mg_flag_group;

typedef enum {
    MG_FLAG_INT = 0,     /* int field, or an int value checked against `trivial` */
    MG_FLAG_INT64,       /* int64_t, limited to ±2^53 so JSON reads it back exactly */
    MG_FLAG_DOUBLE,      /* finite double */
    MG_FLAG_BOOL,        /* store_true: no value */
    MG_FLAG_STRING,      /* char[size]; `choices` restricts the value when set */
    MG_FLAG_ENUM,        /* int-sized enum field: the index of the value in `choices` */
    MG_FLAG_STRING_LIST, /* char[size]: argparse nargs='*', the values up to the next "--" flag,
                          * stored joined by single spaces (a value may not contain whitespace) */
    MG_FLAG_STRING_REF,  /* const char *: the argument itself (argv outlives the parse), NULL when
                          * absent; `choices` restricts it. Subcommand tables only, never in
                          * mg_config (config/flags_command.h) */
} mg_flag_kind;

typedef enum {
    MG_FLAG_IMPLEMENTED = 0,
    MG_FLAG_IGNORED, /* accepted for compatibility; selects an implementation we always use */
    MG_FLAG_NOT_YET, /* recognised; only `trivial` (or absence) is accepted until implemented */
    MG_FLAG_PARTIAL, /* stored (`megatron plan` takes any value); `megatron train` runs only
                      * `trivial`, and validation refuses the rest (`why` says why) */
    MG_FLAG_RETIRED, /* a spelling Megatron-LM retired: refused with `why`, Megatron's own words
                      * or the flag that replaced it */
} mg_flag_status;

typedef struct {
    const char *name; /* "--hidden-size" */
    mg_flag_group group;
    mg_flag_kind kind;
    mg_flag_status status;
    size_t offset;              /* offsetof(mg_config, field) when key != NULL */
    size_t size;                /* sizeof the field (string capacity) */
    const char *key;            /* field name, the JSON key; NULL: the value is not stored */
    const char *arg;            /* metavariable shown in --help ("N", "PATH"); NULL for bools */
    const char *const *choices; /* enum/string choices, NULL-terminated */
    const char *const *later;   /* enum/string choices Megatron has that this build does not yet */
    const char *def;            /* default shown in --help; NULL: formatted from the defaults */
    const char *trivial;        /* NOT_YET: the value accepted as a no-op; NULL: any use fails;
                                 * PARTIAL: the one value `megatron train` runs */
    const char *why;            /* NOT_YET: "(single process); use 1" — completes the error;
                                 * PARTIAL: why only `trivial`; RETIRED: the words after the
                                 * flag's name in its error */
    const char *help;           /* one line */
} mg_flag_spec;

extern const mg_flag_spec mg_flag_table[];
extern const int mg_flag_count;
extern const char *const mg_flag_group_names[MG_FLAG_GROUP_COUNT];

/* The status as --help and docs/flags.md show it: "" (implemented), "[no effect here]",
 * "[not yet]", "[only 1]" (partial: the value train runs) or "[retired]". */
void mg_flag_status_tag(const mg_flag_spec *f, char *out, size_t cap);

/* Index of the flag called `name` (with dashes), or -1. */
int mg_flag_find(const char *name);

static inline void *mg_flag_field(mg_config *c, const mg_flag_spec *f) {
    return (char *)c + f->offset;
}
static inline const void *mg_flag_cfield(const mg_config *c, const mg_flag_spec *f) {
    return (const char *)c + f->offset;
}

#endif
