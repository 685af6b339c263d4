/* The data flags: --data-path takes several values (argparse nargs='*'), --split's default,
 * --tokenizer-type choices, and the data checks of mg_config_validate (one data source, the
 * tokenizer's files). */
#include "test.h"

#include "config/flags.h"
#include "config/flags_table.h"

#include <stdlib.h>
#include <string.h>

static mg_status parse_args(mg_config *c, const char *const *args) {
    char *argv[64];
    int argc = 0;
    while (args[argc] && argc < 64) argv[argc] = (char *)args[argc], argc++;
    bool help = false;
    return mg_flags_parse(c, argc, argv, &help);
}

MG_TEST(flags_data_defaults) {
    mg_config c;
    mg_config_defaults(&c);
    MG_EXPECT(!strcmp(c.split, "969, 30, 1"), "split default '%s' (Megatron's legacy)", c.split);
    MG_EXPECT(!c.data_path[0] && !c.data_cache_path[0] && !c.tokenizer_type[0] &&
                  !c.vocab_file[0] && !c.merge_file[0],
              "no data paths by default");
    const char *impl[] = {"--data-path",      "--split",      "--data-cache-path",
                          "--tokenizer-type", "--vocab-file", "--merge-file"};
    for (int i = 0; i < 6; i++)
        MG_EXPECT(mg_flag_find(impl[i]) >= 0 &&
                      mg_flag_table[mg_flag_find(impl[i])].status == MG_FLAG_IMPLEMENTED,
                  "%s should be implemented", impl[i]);
}

MG_TEST(flags_data_path_takes_values_up_to_the_next_flag) {
    mg_config c;
    mg_config_defaults(&c);
    const char *a[] = {"--data-path", "0.3",    "/d/a_text_document", "0.7", "/d/b_text_document",
                       "--split",     "90,8,2", "--seq-length",       "8",   NULL};
    MG_EXPECT_OK(parse_args(&c, a));
    MG_EXPECT(!strcmp(c.data_path, "0.3 /d/a_text_document 0.7 /d/b_text_document"),
              "data_path '%s'", c.data_path);
    MG_EXPECT(!strcmp(c.split, "90,8,2") && c.seq_length == 8, "later flags still parse");
    const char *b[] = {"--data-path", "-1", "/a", NULL}; /* only "--" ends the list */
    MG_EXPECT_OK(parse_args(&c, b));
    MG_EXPECT(!strcmp(c.data_path, "-1 /a"), "'-1' is a value: '%s'", c.data_path);
    const char *e[] = {"--data-path=/x/y", NULL};
    MG_EXPECT_OK(parse_args(&c, e));
    MG_EXPECT(!strcmp(c.data_path, "/x/y"), "--data-path=V: '%s'", c.data_path);
    const char *r[] = {"--data-path", "/a", "/b", "/c", "--data-path", "/d", NULL};
    MG_EXPECT_OK(parse_args(&c, r));
    MG_EXPECT(!strcmp(c.data_path, "/d"), "last occurrence wins: '%s'", c.data_path);
    for (size_t i = strlen(c.data_path); i < sizeof c.data_path; i++)
        if (c.data_path[i]) {
            MG_EXPECT(0, "stale byte at data_path[%zu]", i);
            break;
        }
    const char *tk[] = {"--tokenizer-type",
                        "NullTokenizer",
                        "--vocab-file",
                        "v.json",
                        "--merge-file",
                        "m.txt",
                        "--data-cache-path",
                        "/tmp/c",
                        NULL};
    MG_EXPECT_OK(parse_args(&c, tk));
    MG_EXPECT(!strcmp(c.tokenizer_type, "NullTokenizer") && !strcmp(c.vocab_file, "v.json") &&
                  !strcmp(c.merge_file, "m.txt") && !strcmp(c.data_cache_path, "/tmp/c"),
              "string flags stored");

    mg_config before = c;
    const char *n0[] = {"--data-path", "--split", "1", NULL};
    MG_EXPECT_ERROR(parse_args(&c, n0), MG_ERR_USAGE,
                    "--data-path expects at least one value; write --data-path [W] PREFIX ...");
    const char *n1[] = {"--data-path", NULL};
    MG_EXPECT_ERROR(parse_args(&c, n1), MG_ERR_USAGE, "--data-path expects at least one value");
    const char *n2[] = {"--data-path=", NULL};
    MG_EXPECT_ERROR(parse_args(&c, n2), MG_ERR_USAGE, "is empty or contains whitespace");
    const char *n3[] = {"--data-path", "a b", NULL};
    MG_EXPECT_ERROR(parse_args(&c, n3), MG_ERR_USAGE,
                    "--data-path value 'a b' is empty or contains whitespace");
    static char longv[5000];
    memset(longv, 'p', sizeof longv - 1);
    const char *n4[] = {"--data-path", longv, NULL};
    MG_EXPECT_ERROR(parse_args(&c, n4), MG_ERR_USAGE, "--data-path value is too long");
    const char *n5[] = {"--tokenizer-type", "gpt2", NULL};
    MG_EXPECT_ERROR(parse_args(&c, n5), MG_ERR_USAGE,
                    "--tokenizer-type expects one of GPT2BPETokenizer, HuggingFaceTokenizer, "
                    "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer or "
                    "NullTokenizer, got 'gpt2'");
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "failed parses must not change the config");

    char *json = NULL;
    MG_EXPECT_OK(mg_config_to_json(&before, &json));
    mg_config back;
    mg_config_defaults(&back);
    MG_EXPECT_OK(mg_config_from_json(&back, json));
    MG_EXPECT(!memcmp(&back, &before, sizeof back), "data fields round-trip through JSON");
    free(json);
}

/* A valid model and run with `extra` appended and no data flags of its own. */
static mg_status validate_with(mg_config *c, const char *const *extra) {
    const char *args[48] = {"--num-layers",          "2",  "--hidden-size", "64",
                            "--num-attention-heads", "4",  "--seq-length",  "32",
                            "--train-iters",         "10", "--lr",          "1e-3"};
    int n = 12;
    for (int i = 0; extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    mg_config_defaults(c);
    MG_CHECK(parse_args(c, args));
    return mg_config_validate(c);
}

MG_TEST(flags_data_validation) {
    mg_config c;
    const char *ok_file = "tests/golden/dataset/blend_weighted/case.json"; /* exists */
    const char *gpt2[] = {"--data-path",      "/d/a",         "--tokenizer-type",
                          "GPT2BPETokenizer", "--vocab-file", ok_file,
                          "--merge-file",     ok_file,        NULL};
    MG_EXPECT_OK(validate_with(&c, gpt2));
    MG_EXPECT(c.vocab_size == -1, "GPT2BPETokenizer leaves --vocab-size to the tokenizer");
    const char *null_tok[] = {
        "--data-path", "/d/a", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000", NULL};
    MG_EXPECT_OK(validate_with(&c, null_tok));
    const char *mock_gpt2[] = {"--mock-data",
                               "--tokenizer-type",
                               "GPT2BPETokenizer",
                               "--vocab-file",
                               ok_file,
                               "--merge-file",
                               ok_file,
                               NULL};
    MG_EXPECT_OK(validate_with(&c, mock_gpt2));
    const char *hf[] = {"--data-path",
                        "/d/a",
                        "--tokenizer-type",
                        "HuggingFaceTokenizer",
                        "--tokenizer-model",
                        "tests/golden/tokenizers/llama3",
                        NULL};
    MG_EXPECT_OK(validate_with(&c, hf));
    MG_EXPECT(c.vocab_size == -1 && !strcmp(c.tokenizer_model, "tests/golden/tokenizers/llama3"),
              "HuggingFaceTokenizer leaves --vocab-size to the tokenizer");

    struct {
        const char *extra[12];
        const char *msg;
    } bad[] = {
        {{"--mock-data", "--vocab-size", "100", "--data-path", "/d/a", NULL},
         "--mock-data and --data-path are both given; pass only one"},
        {{"--vocab-size", "100", NULL}, "no training data: pass --mock-data or --data-path PREFIX"},
        {{"--data-path", "/d/a", "--vocab-size", "100", NULL},
         "--data-path needs --tokenizer-type: GPT2BPETokenizer (with --vocab-file and "
         "--merge-file), NullTokenizer (with --vocab-size), or HuggingFaceTokenizer"},
        {{"--data-path", "/d/a", "--tokenizer-type", "HuggingFaceTokenizer", NULL},
         "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model PATH (a tokenizer.json "
         "or its directory)"},
        {{"--data-path", "/d/a", "--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model",
          "tests", NULL},
         "--tokenizer-model tests: no such file (a SentencePiece .model)"},
        {{"--data-path", "/d/a", "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model",
          "/nonexistent", NULL},
         "--tokenizer-model /nonexistent: no such file or directory"},
        {{"--data-path", "/d/a", "--tokenizer-type", "GPT2BPETokenizer", "--merge-file", ok_file,
          NULL},
         "--tokenizer-type GPT2BPETokenizer needs --vocab-file PATH (GPT-2's vocab.json)"},
        {{"--data-path", "/d/a", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file",
          "/nonexistent/vocab.json", "--merge-file", ok_file, NULL},
         "--vocab-file /nonexistent/vocab.json: no such file (GPT-2's vocab.json)"},
        {{"--data-path", "/d/a", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", ok_file,
          NULL},
         "needs --merge-file PATH (GPT-2's merges.txt)"},
        {{"--data-path", "/d/a", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", ok_file,
          "--merge-file", "tests", NULL},
         "--merge-file tests: no such file"},
        {{"--data-path", "/d/a", "--tokenizer-type", "NullTokenizer", NULL},
         "--tokenizer-type NullTokenizer needs --vocab-size N"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        MG_EXPECT_ERROR(validate_with(&c, bad[i].extra), MG_ERR_USAGE, bad[i].msg);
}
