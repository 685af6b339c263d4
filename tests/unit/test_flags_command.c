/* A subcommand's own flag table (config/flags_command.h): typed values into the subcommand's
 * struct, --flag=value, the one-line errors, suggestions from its table (and Megatron's when it
 * takes train flags too), --help from the table, and nothing changed by a failed parse. */
#include "test.h"

#include "config/flags.h"
#include "config/flags_command.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *path, *mode;
    int count;
    int64_t big;
    double rate;
    int pick;
    char list[64];
    bool verbose;
} demo_args;

static const char *const k_modes[] = {"fast", "slow", NULL};
static const char *const k_picks[] = {"first", "second", NULL};
static const char *const k_groups[] = {"inputs", "knobs"};
#define ARG(f) MG_FLAG_FIELD(demo_args, f)
static const mg_flag_spec k_rows[] = {
    {"--path", MG_FLAG_GROUP(0), .kind = MG_FLAG_STRING_REF, ARG(path), .arg = "PATH",
     .def = "required", .help = "where"},
    {"--mode", MG_FLAG_GROUP(0), .kind = MG_FLAG_STRING_REF, ARG(mode), .arg = "MODE",
     .choices = k_modes, .help = "how"},
    {"--list", MG_FLAG_GROUP(0), .kind = MG_FLAG_STRING_LIST, ARG(list), .arg = "X ...",
     .help = "several"},
    {"--max-new-tokens", MG_FLAG_GROUP(1), .kind = MG_FLAG_INT, ARG(count), .arg = "N",
     .help = "how many"},
    {"--big", MG_FLAG_GROUP(1), .kind = MG_FLAG_INT64, ARG(big), .arg = "N", .help = "large"},
    {"--rate", MG_FLAG_GROUP(1), .kind = MG_FLAG_DOUBLE, ARG(rate), .arg = "R", .help = "rate"},
    {"--pick", MG_FLAG_GROUP(1), .kind = MG_FLAG_ENUM, ARG(pick), .arg = "P", .choices = k_picks,
     .help = "one of two"},
    {"--verbose", MG_FLAG_GROUP(1), .kind = MG_FLAG_BOOL, ARG(verbose), .help = "talk"},
};
#undef ARG

static demo_args defaults(void) {
    return (demo_args){.mode = "fast", .count = 32, .big = -1, .rate = 0.5};
}

/* Parses a NULL-terminated list; megatron: also Megatron's flags, into *c. */
static mg_status parse(demo_args *a, mg_flag_command *cmd, mg_config *c, bool *help,
                       const char *const *args) {
    char *argv[32];
    int argc = 0;
    while (args[argc] && argc < 32) argv[argc] = (char *)args[argc], argc++;
    *cmd =
        MG_FLAG_COMMAND("demo", "usage: megatron demo --path PATH [flags]\n", k_rows, k_groups, a);
    cmd->megatron = c;
    return mg_flags_parse_command(cmd, argc, argv, help);
}

MG_TEST(flags_command_typed_values) {
    demo_args a = defaults();
    mg_flag_command cmd;
    bool help = true;
    const char *args[] = {"--path=/x/y", "--max-new-tokens",
                          "7",           "--big=9007199254740992",
                          "--rate",      "-.25",
                          "--pick",      "second",
                          "--mode=slow", "--list",
                          "a",           "b",
                          "--verbose",   NULL};
    MG_EXPECT_OK(parse(&a, &cmd, NULL, &help, args));
    MG_EXPECT(!help, "help set without --help");
    MG_EXPECT(!strcmp(a.path, "/x/y") && !strcmp(a.mode, "slow"), "strings: %s %s", a.path, a.mode);
    MG_EXPECT(a.count == 7 && a.big == 9007199254740992LL && a.rate == -0.25 && a.pick == 1,
              "numbers: %d %lld %g %d", a.count, (long long)a.big, a.rate, a.pick);
    MG_EXPECT(!strcmp(a.list, "a b") && a.verbose, "list '%s', bool %d", a.list, a.verbose);
    MG_EXPECT(mg_flags_command_seen(&cmd, "--rate") && !mg_flags_command_seen(&cmd, "--nope"),
              "seen");
    /* a flag given twice keeps the last value; the untouched ones keep their defaults */
    a = defaults();
    const char *twice[] = {"--max-new-tokens", "1", "--max-new-tokens=2", NULL};
    MG_EXPECT_OK(parse(&a, &cmd, NULL, &help, twice));
    MG_EXPECT(a.count == 2 && a.rate == 0.5 && !a.path && !mg_flags_command_seen(&cmd, "--rate"),
              "count %d rate %g", a.count, a.rate);
}

MG_TEST(flags_command_errors_leave_args_untouched) {
    struct {
        const char *args[5];
        const char *want;
    } cases[] = {
        {{"--max-new-tokens", "many", NULL}, "--max-new-tokens expects an integer, got 'many'"},
        {{"--max-new-tokens=99999999999", NULL}, "--max-new-tokens expects an integer in ["},
        {{"--big", "1e3", NULL}, "--big expects an integer, got '1e3'"},
        {{"--rate=fast", NULL}, "--rate expects a number, got 'fast'"},
        {{"--pick", "third", NULL}, "--pick expects one of first or second, got 'third'"},
        {{"--mode", "medium", NULL}, "--mode expects one of fast or slow, got 'medium'"},
        {{"--path", NULL}, "--path expects a value; write --path PATH"},
        {{"--path", "--verbose", NULL}, "--path expects a value, got the flag '--verbose'"},
        {{"--verbose=yes", NULL}, "--verbose takes no value"},
        {{"--list", "--verbose", NULL}, "--list expects at least one value"},
        {{"--max-new-token", "3", NULL},
         "unknown flag '--max-new-token' for `megatron demo`; did you mean '--max-new-tokens'?"},
        {{"--xyzzy", NULL},
         "unknown flag '--xyzzy' for `megatron demo`; see `megatron demo --help` for the flags"},
        {{"--hidden-size", "8", NULL}, "unknown flag '--hidden-size' for `megatron demo`"},
        {{"stray", NULL}, "unexpected argument 'stray'; flags start with -- (see `megatron demo"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        demo_args a = defaults(), before = a;
        mg_flag_command cmd;
        bool help;
        MG_EXPECT_ERROR(parse(&a, &cmd, NULL, &help, cases[i].args), MG_ERR_USAGE, cases[i].want);
        MG_EXPECT(!memcmp(&a, &before, sizeof a), "case %zu changed the arguments", i);
        MG_EXPECT(!strchr(mg_error_message(), '\n'), "case %zu: not one line", i);
    }
}

/* With Megatron's flags: one pass over both tables, suggestions from both, the config untouched
 * when either part fails, mg_flags_seen updated on success. */
MG_TEST(flags_command_with_megatron_flags) {
    demo_args a = defaults();
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    mg_flag_command cmd;
    bool help;
    const char *bad[] = {"--num-layers", "4", "--max-new-tokens", "x", NULL};
    MG_EXPECT_ERROR(parse(&a, &cmd, &c, &help, bad), MG_ERR_USAGE, "--max-new-tokens expects");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "a failed parse must not change the config");
    const char *typo[] = {"--hiden-size", "8", NULL};
    MG_EXPECT_ERROR(parse(&a, &cmd, &c, &help, typo), MG_ERR_USAGE,
                    "unknown flag '--hiden-size' for `megatron demo`; did you mean "
                    "'--hidden-size'?");
    const char *own_typo[] = {"--max-new-tokns=3", NULL};
    MG_EXPECT_ERROR(parse(&a, &cmd, &c, &help, own_typo), MG_ERR_USAGE,
                    "did you mean '--max-new-tokens'?");
    const char *ok[] = {"--num-layers=4", "--max-new-tokens", "3", "--hidden-size", "64", NULL};
    MG_EXPECT_OK(parse(&a, &cmd, &c, &help, ok));
    MG_EXPECT(c.num_layers == 4 && c.hidden_size == 64 && a.count == 3, "values %d %d %d",
              c.num_layers, c.hidden_size, a.count);
    MG_EXPECT(mg_flags_seen("--num-layers") && !mg_flags_seen("--seq-length"), "seen flags");
}

MG_TEST(flags_command_help) {
    demo_args a = defaults(), before = a;
    mg_flag_command cmd;
    bool help = false;
    const char *args[] = {"--max-new-tokens", "oops", "-h", NULL};
    MG_EXPECT_OK(parse(&a, &cmd, NULL, &help, args));
    MG_EXPECT(help && !memcmp(&a, &before, sizeof a), "-h: help, nothing parsed");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    mg_flags_command_print_help(&cmd, f);
    fclose(f);
    MG_EXPECT(!strncmp(text, "usage: megatron demo --path PATH [flags]\n", 41), "usage first");
    const char *want[] = {
        "\ninputs:\n",        "\nknobs:\n", "--path PATH", "required",  "--mode MODE", "fast",
        "--max-new-tokens N", "32",         "--rate R",    "0.5",       "--pick P",    "first",
        "--list X ...",       "--verbose",  "off",         "--help, -h"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        MG_EXPECT(strstr(text, want[i]) != NULL, "help lacks '%s':\n%s", want[i], text);
    const char *in = strstr(text, "\ninputs:"), *kn = strstr(text, "\nknobs:");
    MG_EXPECT(in && kn && in < strstr(in, "--path PATH") && strstr(in, "--path PATH") < kn &&
                  kn < strstr(kn, "--max-new-tokens N"),
              "flags under their groups");
    free(text);
}
