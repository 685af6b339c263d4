/* Command-line parsing against the flag table, the "did you mean" suggestion, the seen-flags
 * record and --help. Semantics follow argparse as Megatron configures it (allow_abbrev=False):
 * no abbreviations, a repeated flag keeps its last value, store_true flags take no value.
 * Subcommands parse their own tables (config/flags_command.h) through the same loop: each table is
 * a scope (rows, the struct they point into, what was seen), looked up in order. The loop goes on
 * past a refused flag, so that one run reports them all (flag_problems). */
#include "config/flags.h"
#include "config/flags_command.h"
#include "config/flags_table.h"
#include "core/log.h"
#include "core/text.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MG_JSON_INT_MAX 9007199254740992LL /* 2^53: the largest integer a double holds exactly */

static bool g_seen[MG_FLAG_MAX]; /* flags of the last successful parse */

bool mg_flags_seen(const char *flag) {
    int k = mg_flag_find(flag);
    return k >= 0 && g_seen[k];
}

size_t mg_flags_no_effect_seen(char *out, size_t cap) {
    size_t used = 0, n = 0;
    if (cap) out[0] = 0;
    for (int k = 0; k < mg_flag_count; k++) {
        if (!g_seen[k] || mg_flag_table[k].status != MG_FLAG_IGNORED) continue;
        int w = snprintf(out + used, cap > used ? cap - used : 0, "%s%s", n ? ", " : "",
                         mg_flag_table[k].name);
        if (w > 0 && used + (size_t)w < cap) used += (size_t)w;
        n++;
    }
    return n;
}

mg_status mg_flags_take_unseen(mg_config *c, const mg_config *from, const char *const *flags,
                               int n) {
    for (int i = 0; i < n; i++) {
        int k = mg_flag_find(flags[i]);
        if (k < 0 || !mg_flag_table[k].key)
            return MG_FAIL(MG_ERR_INTERNAL, "%s is not a flag with a value", flags[i]);
        if (!g_seen[k])
            memcpy(mg_flag_field(c, &mg_flag_table[k]), mg_flag_cfield(from, &mg_flag_table[k]),
                   mg_flag_table[k].size);
    }
    return MG_OK;
}

/* ---- value parsing ---- */

static mg_status parse_int(const char *flag, const char *s, long long lo, long long hi,
                           long long *out) {
    char *end;
    errno = 0;
    long long v = (*s && !isspace((unsigned char)*s)) ? strtoll(s, &end, 10) : 0;
    if (!*s || isspace((unsigned char)*s) || *end)
        return MG_FAIL(MG_ERR_USAGE, "%s expects an integer, got '%s'", flag, s);
    if (errno == ERANGE || v < lo || v > hi)
        return MG_FAIL(MG_ERR_USAGE, "%s expects an integer in [%lld, %lld], got '%s'", flag, lo,
                       hi, s);
    *out = v;
    return MG_OK;
}

static mg_status parse_double(const char *flag, const char *s, double *out) {
    char *end;
    double v = (*s && !isspace((unsigned char)*s)) ? strtod(s, &end) : 0;
    if (!*s || isspace((unsigned char)*s) || *end)
        return MG_FAIL(MG_ERR_USAGE, "%s expects a number, got '%s'", flag, s);
    if (!isfinite(v)) return MG_FAIL(MG_ERR_USAGE, "%s expects a finite number, got '%s'", flag, s);
    *out = v;
    return MG_OK;
}

static int choice_index(const char *const *choices, const char *s) {
    for (int i = 0; choices && choices[i]; i++)
        if (!strcmp(choices[i], s)) return i;
    return -1;
}

/* "a, b or c" */
static void join_choices(const char *const *choices, char *buf, size_t cap) {
    buf[0] = '\0';
    int n = 0;
    while (choices[n]) n++;
    for (int i = 0; i < n; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, cap - used, "%s%s", i == 0 ? "" : (i == n - 1 ? " or " : ", "),
                 choices[i]);
    }
}

/* The parsed value of one flag occurrence. */
typedef struct {
    long long i; /* INT, INT64, ENUM (index) */
    double d;    /* DOUBLE */
    const char *s;
} flag_value;

static mg_status parse_value(const mg_flag_spec *f, const char *s, flag_value *v) {
    char list[256];
    v->s = s;
    switch (f->kind) {
    case MG_FLAG_INT:
        return parse_int(f->name, s, INT_MIN, INT_MAX, &v->i);
    case MG_FLAG_INT64:
        return parse_int(f->name, s, -MG_JSON_INT_MAX, MG_JSON_INT_MAX, &v->i);
    case MG_FLAG_DOUBLE:
        return parse_double(f->name, s, &v->d);
    case MG_FLAG_BOOL:
        v->i = 1;
        return MG_OK;
    case MG_FLAG_ENUM:
        v->i = choice_index(f->choices, s);
        if (v->i >= 0) return MG_OK;
        join_choices(f->choices, list, sizeof list);
        if (choice_index(f->later, s) >= 0)
            return MG_FAIL(MG_ERR_UNSUPPORTED, "%s %s is not supported yet by this build; use %s",
                           f->name, s, list);
        return MG_FAIL(MG_ERR_USAGE, "%s expects one of %s, got '%s'", f->name, list, s);
    case MG_FLAG_STRING:
    case MG_FLAG_STRING_LIST:
    case MG_FLAG_STRING_REF:
        if (f->choices && choice_index(f->choices, s) < 0) {
            join_choices(f->choices, list, sizeof list);
            if (choice_index(f->later, s) >= 0)
                return MG_FAIL(MG_ERR_UNSUPPORTED,
                               "%s %s is not supported yet by this build; use %s", f->name, s,
                               list);
            return MG_FAIL(MG_ERR_USAGE, "%s expects one of %s, got '%s'", f->name, list, s);
        }
        if (f->kind != MG_FLAG_STRING_REF && f->key && strlen(s) >= f->size)
            return MG_FAIL(MG_ERR_USAGE,
                           "%s value is too long (%zu bytes, at most %zu); use a shorter "
                           "path",
                           f->name, strlen(s), f->size - 1);
        return MG_OK;
    }
    return MG_FAIL(MG_ERR_INTERNAL, "flag %s has an unknown kind", f->name);
}

/* Whether a not-yet flag's value is the no-op `trivial` one. */
static bool is_trivial(const mg_flag_spec *f, const flag_value *v) {
    if (!f->trivial) return false;
    switch (f->kind) {
    case MG_FLAG_INT:
    case MG_FLAG_INT64:
        return v->i == strtoll(f->trivial, NULL, 10);
    case MG_FLAG_DOUBLE:
        return v->d == strtod(f->trivial, NULL);
    case MG_FLAG_STRING:
    case MG_FLAG_STRING_LIST:
        return !strcmp(v->s, f->trivial);
    default:
        return false;
    }
}

/* base: the struct the row's offset points into (mg_config, or a subcommand's arguments). */
static void store_value(void *base, const mg_flag_spec *f, const flag_value *v) {
    void *p = (char *)base + f->offset;
    switch (f->kind) {
    case MG_FLAG_INT:
    case MG_FLAG_ENUM:
        *(int *)p = (int)v->i;
        break;
    case MG_FLAG_INT64:
        *(int64_t *)p = (int64_t)v->i;
        break;
    case MG_FLAG_DOUBLE:
        *(double *)p = v->d;
        break;
    case MG_FLAG_BOOL:
        *(bool *)p = true;
        break;
    case MG_FLAG_STRING:
    case MG_FLAG_STRING_LIST:
        memset(p, 0, f->size); /* no stale tail from an earlier, longer value */
        memcpy(p, v->s, strlen(v->s));
        break;
    case MG_FLAG_STRING_REF:
        *(const char **)p = v->s;
        break;
    }
}

static mg_status apply_flag(void *base, const mg_flag_spec *f, const char *s) {
    flag_value v = {0};
    MG_CHECK(parse_value(f, s, &v));
    const char *sep = f->kind == MG_FLAG_BOOL ? "" : " ", *shown = f->kind == MG_FLAG_BOOL ? "" : s;
    switch (f->status) {
    case MG_FLAG_IMPLEMENTED:
    case MG_FLAG_PARTIAL: /* stored; validation refuses what `megatron train` cannot run */
        store_value(base, f, &v);
        return MG_OK;
    case MG_FLAG_IGNORED: /* stored where it has a field (a check reads it), with no effect */
        if (f->key) store_value(base, f, &v);
        return MG_OK;
    case MG_FLAG_NOT_YET:
        if (is_trivial(f, &v)) return MG_OK;
        return MG_FAIL(MG_ERR_UNSUPPORTED, "%s%s%s is not supported yet by this build %s", f->name,
                       sep, shown, f->why);
    case MG_FLAG_RETIRED:
        return MG_FAIL(MG_ERR_USAGE, "%s %s", f->name, f->why);
    }
    return MG_FAIL(MG_ERR_INTERNAL, "flag %s has an unknown status", f->name);
}

/* ---- unknown flags ---- */

/* One table being parsed: its rows, the copy of the struct its values go into, the rows seen. */
typedef struct {
    const mg_flag_spec *flags;
    int n;
    void *target;
    bool *seen; /* (n) */
} flag_scope;

static int scope_find(const flag_scope *sc, const char *name) {
    for (int i = 0; i < sc->n; i++)
        if (!strcmp(sc->flags[i].name, name)) return i;
    return -1;
}

/* The closest known flag of the scopes (in order; ties go to the first): the smallest edit
 * distance within max(2, len/4), else the shortest flag that starts with what was typed (an
 * abbreviation, which argparse here does not allow). */
static const char *suggest(const char *name, const flag_scope *scopes, int n_scopes) {
    const char *best = NULL, *prefix = NULL;
    size_t best_d = SIZE_MAX, len = strlen(name);
    for (int s = 0; s < n_scopes; s++)
        for (int i = s == 0 ? -1 : 0; i < scopes[s].n; i++) {
            const char *cand = i < 0 ? "--help" : scopes[s].flags[i].name;
            size_t cl = strlen(cand), d = mg_text_near(name, cand);
            if (d < best_d) best = cand, best_d = d;
            if (len >= 5 && !strncmp(cand, name, len) && (!prefix || cl < strlen(prefix)))
                prefix = cand;
        }
    return best ? best : prefix;
}

/* command: NULL for `megatron train` (its messages name no command). */
static mg_status unknown_flag(const char *command, const char *name, const flag_scope *scopes,
                              int n_scopes) {
    const char *s = suggest(name, scopes, n_scopes);
    if (!command) {
        if (s) return MG_FAIL(MG_ERR_USAGE, "unknown flag '%s'; did you mean '%s'?", name, s);
        return MG_FAIL(MG_ERR_USAGE, "unknown flag '%s'; see `megatron train --help` for the flags",
                       name);
    }
    if (s)
        return MG_FAIL(MG_ERR_USAGE, "unknown flag '%s' for `megatron %s`; did you mean '%s'?",
                       name, command, s);
    return MG_FAIL(MG_ERR_USAGE,
                   "unknown flag '%s' for `megatron %s`; see `megatron %s --help` for the flags",
                   name, command, command);
}

/* ---- every problem of a command line ----
 * A script ported from Megatron-LM often carries several flags this build refuses; each is
 * reported (its closest flag, or its reason) so that one run lists them all. A single problem
 * stays the one-line error it always was, with its own status; several are printed one a line
 * as they come, then end in one MG_ERR_USAGE line naming them. */
typedef struct {
    int n;
    mg_status first;       /* the first problem's status, returned when it is the only one */
    char first_line[1024]; /* its message, printed once a second problem shows */
    char names[512];       /* the flags or arguments at fault: "--a, --b" */
} flag_problems;

/* Records the problem `st` (its message is the current error) of the argument `what`. */
static void problem_add(flag_problems *p, mg_status st, const char *what) {
    if (p->n == 0) {
        p->first = st;
        snprintf(p->first_line, sizeof p->first_line, "%s", mg_error_message());
    } else {
        if (p->n == 1) mg_log_error("%s", p->first_line);
        mg_log_error("%s", mg_error_message());
    }
    size_t used = strlen(p->names);
    if (used + 1 < sizeof p->names)
        snprintf(p->names + used, sizeof p->names - used, "%s%s", p->n ? ", " : "", what);
    p->n++;
}

static mg_status problems_status(const flag_problems *p, const char *command) {
    if (p->n == 0) return MG_OK;
    if (p->n == 1) return MG_FAIL(p->first, "%s", p->first_line);
    return MG_FAIL(MG_ERR_USAGE,
                   "%d flags of the command line were refused (%s), each on its own line above "
                   "with its closest flag or its reason; see `megatron %s --help`",
                   p->n, p->names, command ? command : "train");
}

/* argparse takes "-1" or "-.5" as a value, anything else starting with '-' as a flag. */
static bool looks_like_flag(const char *s) {
    if (s[0] != '-' || s[1] == '\0') return false;
    return !(isdigit((unsigned char)s[1]) || (s[1] == '.' && isdigit((unsigned char)s[2])));
}

/* argparse's nargs='*': the values after argv[*i] up to the next "--" flag, joined by spaces;
 * *i ends on the last value consumed. */
static mg_status join_list(const mg_flag_spec *f, int argc, char **argv, int *i, char *out,
                           size_t cap) {
    size_t used = 0;
    out[0] = '\0';
    int n = 0;
    while (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2) != 0) {
        const char *v = argv[++*i];
        if (!*v || strpbrk(v, " \t\n\r\f\v"))
            return MG_FAIL(MG_ERR_USAGE,
                           "%s value '%s' is empty or contains whitespace; pass "
                           "each entry as its own argument",
                           f->name, v);
        size_t len = strlen(v);
        if (used + len + 2 > cap)
            return MG_FAIL(MG_ERR_USAGE, "%s values are too long (at most %zu bytes)", f->name,
                           (f->size ? f->size : cap) - 1);
        if (n++) out[used++] = ' ';
        memcpy(out + used, v, len + 1);
        used += len;
    }
    if (n == 0)
        return MG_FAIL(MG_ERR_USAGE, "%s expects at least one value; write %s %s", f->name, f->name,
                       f->arg);
    return MG_OK;
}

static bool help_given(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return true;
    return false;
}

/* Skips the arguments after argv[*i] up to the next one that looks like a flag: the values of
 * a flag that could not be taken, so that they are not reported as stray arguments. */
static void skip_values(int argc, char **argv, int *i) {
    while (*i + 1 < argc && !looks_like_flag(argv[*i + 1])) ++*i;
}

/* One argument (argv[*i], and its values: *i ends on the last one consumed), looked up in the
 * scopes in order and stored into that scope's target. The status of its problem, if any, with
 * the message as the current error. */
static mg_status parse_one(const char *command, flag_scope *scopes, int n_scopes, int argc,
                           char **argv, int *i, char *name, size_t name_cap) {
    const char *a = argv[*i];
    snprintf(name, name_cap, "%s", a);
    if (a[0] != '-')
        return MG_FAIL(MG_ERR_USAGE,
                       "unexpected argument '%s'; flags start with -- (see `megatron %s "
                       "--help`)",
                       a, command ? command : "train");
    const char *eq = strchr(a, '=');
    if (eq && (size_t)(eq - a) < name_cap) name[eq - a] = '\0';
    int k = -1;
    flag_scope *sc = NULL;
    for (int s = 0; s < n_scopes && k < 0; s++) sc = &scopes[s], k = scope_find(sc, name);
    if (k < 0) {
        if (!eq) skip_values(argc, argv, i);
        return unknown_flag(command, name, scopes, n_scopes);
    }
    const mg_flag_spec *f = &sc->flags[k];
    const char *value = "";
    char list[8192];
    if (f->kind == MG_FLAG_STRING_LIST && !eq) {
        mg_status st = join_list(f, argc, argv, i, list, sizeof list);
        if (st != MG_OK) {
            skip_values(argc, argv, i);
            return st;
        }
        value = list;
    } else if (f->kind == MG_FLAG_STRING_LIST && (!eq[1] || strpbrk(eq + 1, " \t\n\r\f\v"))) {
        return MG_FAIL(MG_ERR_USAGE,
                       "%s value '%s' is empty or contains whitespace; pass "
                       "each entry as its own argument",
                       name, eq + 1);
    } else if (f->kind == MG_FLAG_BOOL) {
        if (eq)
            return MG_FAIL(MG_ERR_USAGE, "%s takes no value, got '%s'; write just %s", name, a,
                           name);
    } else if (eq) {
        value = eq + 1;
    } else if (*i + 1 >= argc) {
        return MG_FAIL(MG_ERR_USAGE, "%s expects a value; write %s %s", name, name, f->arg);
    } else if (looks_like_flag(argv[*i + 1])) {
        return MG_FAIL(MG_ERR_USAGE, "%s expects a value, got the flag '%s'; write %s %s", name,
                       argv[*i + 1], name, f->arg);
    } else {
        value = argv[++*i];
    }
    sc->seen[k] = true;
    return apply_flag(sc->target, f, value);
}

/* The parse proper: every argument in turn, each problem recorded, then one status for them
 * all. command: NULL for `megatron train`. */
static mg_status parse_argv(const char *command, flag_scope *scopes, int n_scopes, int argc,
                            char **argv) {
    flag_problems problems = {0};
    for (int i = 0; i < argc; i++) {
        char name[128];
        mg_status st = parse_one(command, scopes, n_scopes, argc, argv, &i, name, sizeof name);
        if (st != MG_OK) problem_add(&problems, st, name);
    }
    return problems_status(&problems, command);
}

/* Checks across Megatron's flags, after the parse. */
static mg_status check_megatron(mg_config *c, bool *seen) {
    /* Megatron asserts lr_warmup_iters == 0 when a fraction is given. */
    int wi = mg_flag_find("--lr-warmup-iters"), wf = mg_flag_find("--lr-warmup-fraction");
    if (seen[wi] && seen[wf] && c->lr_warmup_iters != 0)
        return MG_FAIL(MG_ERR_USAGE, "--lr-warmup-iters and --lr-warmup-fraction are both given; "
                                     "pass only one");
    /* Megatron's legacy RoPE switch sets the type, whatever --position-embedding-type says; it
     * counts as given, so a checkpoint's type does not replace it (mg_flags_take_unseen). */
    if (seen[mg_flag_find("--use-rotary-position-embeddings")]) {
        c->position_embedding = MG_POS_ROPE;
        seen[mg_flag_find("--position-embedding-type")] = true;
    }
    return MG_OK;
}

mg_status mg_flags_parse(mg_config *c, int argc, char **argv, bool *help_requested) {
    *help_requested = help_given(argc, argv);
    if (*help_requested) return MG_OK;
    mg_config tmp = *c;
    bool seen[MG_FLAG_MAX] = {false};
    flag_scope scope = {mg_flag_table, mg_flag_count, &tmp, seen};
    MG_CHECK(parse_argv(NULL, &scope, 1, argc, argv));
    MG_CHECK(check_megatron(&tmp, seen));
    *c = tmp;
    memcpy(g_seen, seen, sizeof g_seen);
    return MG_OK;
}

mg_status mg_flags_parse_command(mg_flag_command *cmd, int argc, char **argv,
                                 bool *help_requested) {
    *help_requested = help_given(argc, argv);
    if (*help_requested) return MG_OK;
    if (cmd->n_flags > MG_FLAG_COMMAND_MAX)
        return MG_FAIL(MG_ERR_INTERNAL, "`megatron %s` has %d flags; raise MG_FLAG_COMMAND_MAX",
                       cmd->name, cmd->n_flags);
    void *tmp = malloc(cmd->target_size);
    mg_config *mtmp = cmd->megatron ? malloc(sizeof *mtmp) : NULL;
    if (!tmp || (cmd->megatron && !mtmp)) {
        free(tmp);
        free(mtmp);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory parsing flags");
    }
    memcpy(tmp, cmd->target, cmd->target_size);
    bool seen[MG_FLAG_COMMAND_MAX] = {false}, mseen[MG_FLAG_MAX] = {false};
    flag_scope scopes[2] = {{cmd->flags, cmd->n_flags, tmp, seen},
                            {mg_flag_table, mg_flag_count, mtmp, mseen}};
    if (mtmp) *mtmp = *cmd->megatron;
    mg_status st = parse_argv(cmd->name, scopes, mtmp ? 2 : 1, argc, argv);
    if (st == MG_OK && mtmp) st = check_megatron(mtmp, mseen);
    if (st == MG_OK) {
        memcpy(cmd->target, tmp, cmd->target_size);
        memcpy(cmd->seen, seen, sizeof cmd->seen);
        if (mtmp) {
            *cmd->megatron = *mtmp;
            memcpy(g_seen, mseen, sizeof g_seen);
        }
    }
    free(tmp);
    free(mtmp);
    return st;
}

bool mg_flags_command_seen(const mg_flag_command *cmd, const char *flag) {
    for (int i = 0; i < cmd->n_flags && i < MG_FLAG_COMMAND_MAX; i++)
        if (!strcmp(cmd->flags[i].name, flag)) return cmd->seen[i];
    return false;
}

/* ---- help ---- */

/* d: the struct holding the defaults (mg_config, or a subcommand's arguments). */
static void format_default(const mg_flag_spec *f, const void *d, char *buf, size_t cap) {
    if (f->def) {
        snprintf(buf, cap, "%s", f->def);
        return;
    }
    if (!f->key) {
        snprintf(buf, cap, "%s", f->kind == MG_FLAG_BOOL ? "off" : "-");
        return;
    }
    const void *p = (const char *)d + f->offset;
    switch (f->kind) {
    case MG_FLAG_INT:
        snprintf(buf, cap, "%d", *(const int *)p);
        break;
    case MG_FLAG_INT64:
        snprintf(buf, cap, "%" PRId64, *(const int64_t *)p);
        break;
    case MG_FLAG_DOUBLE:
        snprintf(buf, cap, "%g", *(const double *)p);
        break;
    case MG_FLAG_BOOL:
        snprintf(buf, cap, "%s", *(const bool *)p ? "on" : "off");
        break;
    case MG_FLAG_ENUM:
        snprintf(buf, cap, "%s", f->choices[*(const int *)p]);
        break;
    case MG_FLAG_STRING:
    case MG_FLAG_STRING_LIST:
        snprintf(buf, cap, "%s", *(const char *)p ? (const char *)p : "none");
        break;
    case MG_FLAG_STRING_REF:
        snprintf(buf, cap, "%s", *(const char *const *)p ? *(const char *const *)p : "none");
        break;
    }
}

void mg_flag_status_tag(const mg_flag_spec *f, char *out, size_t cap) {
    switch (f->status) {
    case MG_FLAG_IMPLEMENTED:
        snprintf(out, cap, "%s", "");
        return;
    case MG_FLAG_IGNORED:
        snprintf(out, cap, "%s", "[no effect here]");
        return;
    case MG_FLAG_NOT_YET:
        snprintf(out, cap, "%s", "[not yet]");
        return;
    case MG_FLAG_PARTIAL:
        snprintf(out, cap, "[only %s]", f->trivial);
        return;
    case MG_FLAG_RETIRED:
        snprintf(out, cap, "%s", "[retired]");
        return;
    }
    snprintf(out, cap, "%s", "");
}

/* Each group's heading and rows: flag and metavariable, default, tag, help. */
static void print_rows(FILE *out, const mg_flag_spec *flags, int n, const char *const *groups,
                       int n_groups, const void *defaults) {
    int width = 0;
    for (int i = 0; i < n; i++) {
        const mg_flag_spec *f = &flags[i];
        int w = (int)strlen(f->name) + (f->kind == MG_FLAG_BOOL ? 0 : 1 + (int)strlen(f->arg));
        if (w > width) width = w;
    }
    for (int g = 0; g < n_groups; g++) {
        fprintf(out, "\n%s:\n", groups[g]);
        for (int i = 0; i < n; i++) {
            const mg_flag_spec *f = &flags[i];
            if ((int)f->group != g) continue;
            char flag[160], def[64];
            snprintf(flag, sizeof flag, "%s%s%s", f->name, f->kind == MG_FLAG_BOOL ? "" : " ",
                     f->kind == MG_FLAG_BOOL ? "" : f->arg);
            format_default(f, defaults, def, sizeof def);
            char tag[48];
            mg_flag_status_tag(f, tag, sizeof tag);
            fprintf(out, "  %-*s  %-16s  %s%s", width, flag, def, tag, tag[0] ? " " : "");
            if (f->status == MG_FLAG_RETIRED) /* its answer, in Megatron's words where it has any */
                fprintf(out, "refused: \"%s %s\"\n", f->name, f->why);
            else
                fprintf(out, "%s\n", f->help);
        }
    }
    fprintf(out, "\n  --help, -h  show this text\n");
}

void mg_flags_command_print_help(const mg_flag_command *cmd, FILE *out) {
    fputs(cmd->usage, out);
    print_rows(out, cmd->flags, cmd->n_flags, cmd->groups, cmd->n_groups, cmd->target);
}

void mg_flags_print_help(FILE *out) {
    mg_config d;
    mg_config_defaults(&d);
    fprintf(out,
            "usage: megatron train [flags]\n\n"
            "Flags have Megatron-LM's names and meanings (pretrain_gpt.py). Write --flag value or\n"
            "--flag=value; a flag given twice keeps the last value. [no effect here]: accepted\n"
            "for compatibility (it tunes Megatron's Python internals or selects what this build\n"
            "always does; listed once at start-up). [not yet]: recognised; only the default\n"
            "shown is accepted until it is implemented. [only V]: `megatron plan` takes any\n"
            "value, train runs only V. [retired]: a spelling Megatron retired, refused with\n"
            "its answer. Every refused flag of a command line is reported. docs/flags.md lists\n"
            "every Megatron flag.\n");
    print_rows(out, mg_flag_table, mg_flag_count, mg_flag_group_names, MG_FLAG_GROUP_COUNT, &d);
}
