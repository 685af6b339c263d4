/* `megatron data`: builds the train/valid/test datasets of a --data-path exactly as training
 * does (Megatron's GPTDataset and BlendedDataset indices, cached like Megatron) and prints one
 * split's length, epochs and first samples: token ids, and the decoded text when a tokenizer's
 * files are given (data/tokenizer.h). With --json, stdout is exactly one JSON object:
 *   {"split": "train", "len": N, "num_epochs": E, "samples": [[ids of sample 0], ...]}
 * Flag errors are one line on stderr, exit 2. */
#include "cli/cli.h"

#include "config/flags.h"
#include "config/flags_command.h"
#include "core/status.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

typedef struct {
    char data_path[8192]; /* --data-path's values joined by spaces */
    const char *split, *cache, *vocab, *merges, *tokenizer, *model;
    int seq_length, show; /* show: the split to print, an index into k_splits */
    int64_t seed, first, train_samples, valid_samples, test_samples;
    bool json;
} data_args;

static const char *const k_splits[4] = {"train", "valid", "test", NULL};

static const char usage[] =
    "usage: megatron data --data-path [W] PREFIX ... --seq-length L [flags]\n\n"
    "Shows the samples Megatron's GPT dataset gives the model: the split's length,\n"
    "epochs and first samples (seq-length + 1 token ids each), built and cached as\n"
    "`megatron train` and Megatron-LM build them.\n";

enum { G_DATA, G_TOKENIZER, G_OUTPUT };
static const char *const groups[] = {"dataset", "tokenizer", "output"};
#define ARG(f) MG_FLAG_FIELD(data_args, f)
static const mg_flag_spec flags[] = {
    {"--data-path", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_STRING_LIST, ARG(data_path),
     .arg = "[W] PREFIX ...", .def = "required",
     .help = "a prefix, W1 P1 W2 P2 ... pairs, or prefixes"},
    {"--seq-length", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_INT, ARG(seq_length), .arg = "L",
     .def = "required", .help = "tokens per sample (each sample holds L + 1), at least 2"},
    {"--split", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_STRING_REF, ARG(split), .arg = "A,B,C",
     .help = "train,valid,test proportions"},
    {"--seed", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_INT64, ARG(seed), .arg = "S",
     .help = "data order seed, in [0, 4294967295]"},
    {"--train-samples", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_INT64, ARG(train_samples),
     .arg = "N", .def = "one epoch", .help = "samples of the train split"},
    {"--valid-samples", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_INT64, ARG(valid_samples),
     .arg = "N", .def = "one epoch", .help = "samples of the valid split"},
    {"--test-samples", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_INT64, ARG(test_samples), .arg = "N",
     .def = "one epoch", .help = "samples of the test split"},
    {"--data-cache-path", MG_FLAG_GROUP(G_DATA), .kind = MG_FLAG_STRING_REF, ARG(cache),
     .arg = "DIR", .def = "beside PREFIX",
     .help = "index cache (default PREFIX's directory/cache/GPTDataset_indices)"},
    {"--vocab-file", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(vocab),
     .arg = "PATH", .help = "GPT-2 vocab.json: also print the decoded text (with --merge-file)"},
    {"--merge-file", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(merges),
     .arg = "PATH", .help = "GPT-2 merges.txt (with --vocab-file)"},
    {"--tokenizer-type", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(tokenizer),
     .arg = "T", .choices = mg_tokenizer_type_choices, .def = "GPT2BPETokenizer",
     .help = "decode with GPT2BPETokenizer (--vocab-file, --merge-file), HuggingFaceTokenizer, "
             "SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer "
             "(--tokenizer-model); NullTokenizer: ids only"},
    {"--tokenizer-model", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(model),
     .arg = "PATH",
     .help = "tokenizer.json (or its directory) or SentencePiece .model: also print the decoded "
             "text"},
    {"--show", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_ENUM, ARG(show), .arg = "SPLIT",
     .choices = k_splits, .help = "the split to print: train, valid or test"},
    {"--first", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_INT64, ARG(first), .arg = "K",
     .help = "how many samples to print"},
    {"--json", MG_FLAG_GROUP(G_OUTPUT), .kind = MG_FLAG_BOOL, ARG(json),
     .help = "one JSON object on stdout"},
};
#undef ARG

static mg_status check_range(const char *flag, long long v, long long lo, long long hi) {
    if (v < lo || v > hi)
        return USAGE("data: %s expects an integer in [%lld, %lld], got %lld", flag, lo, hi, v);
    return MG_OK;
}

static void data_prepare(mg_cli_context *cx) {
    data_args *a = cx->args;
    *a = (data_args){.split = "969, 30, 1",
                     .seq_length = -1,
                     .seed = 1234,
                     .first = 4,
                     .train_samples = -1,
                     .valid_samples = -1,
                     .test_samples = -1};
    cx->flags = MG_FLAG_COMMAND("data", usage, flags, groups, a);
}

/* What the parser cannot say: required flags and the values' ranges. */
static mg_status check_args(const data_args *a, const mg_flag_command *cmd) {
    if (!a->data_path[0]) return USAGE("data: missing --data-path PREFIX");
    if (!mg_flags_command_seen(cmd, "--seq-length")) return USAGE("data: missing --seq-length L");
    MG_CHECK(check_range("--seq-length", a->seq_length, 2, INT32_MAX));
    MG_CHECK(check_range("--seed", a->seed, 0, UINT32_MAX));
    MG_CHECK(check_range("--first", a->first, 0, INT64_MAX / 2));
    const char *names[3] = {"--train-samples", "--valid-samples", "--test-samples"};
    const int64_t counts[3] = {a->train_samples, a->valid_samples, a->test_samples};
    for (int s = 0; s < 3; s++)
        if (mg_flags_command_seen(cmd, names[s]))
            MG_CHECK(check_range(names[s], counts[s], 0, INT64_MAX / 2));
    if (!a->vocab != !a->merges)
        return USAGE("data: --vocab-file and --merge-file go together (GPT-2's vocab.json and "
                     "merges.txt)");
    return MG_OK;
}

/* The decoded text of ids on one line, JSON-style escapes for control characters. */
static void print_text(const mg_tokenizer *tok, const int32_t *ids, size_t n) {
    char *text = NULL;
    size_t len = 0;
    if (mg_tokenizer_decode(tok, ids, n, &text, &len) != MG_OK) {
        printf("  text: (not decodable: %s)\n", mg_error_message());
        mg_error_clear();
        return;
    }
    fputs("  text: \"", stdout);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch == '\n')
            fputs("\\n", stdout);
        else if (ch == '\t')
            fputs("\\t", stdout);
        else if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    fputs("\"\n", stdout);
    free(text);
}

static mg_status show(const data_args *a) {
    mg_gpt_data_config c = {.data_path = a->data_path,
                            .split = a->split,
                            .seq_length = (int)a->seq_length,
                            .seed = (uint64_t)a->seed,
                            .cache_path = a->cache,
                            .num_samples = {a->train_samples, a->valid_samples, a->test_samples}};
    mg_tokenizer *tok = NULL;
    mg_tokenizer_spec spec = {.type = a->tokenizer ? a->tokenizer : "GPT2BPETokenizer",
                              .vocab_file = a->vocab,
                              .merge_file = a->merges,
                              .model = a->model};
    bool decode = !a->json && mg_tokenizer_known_type(spec.type) &&
                  (mg_tokenizer_type_uses_model(spec.type) ? a->model != NULL : a->vocab != NULL);
    if (decode) MG_CHECK(mg_tokenizer_load(&tok, &spec));
    mg_gpt_data *d = NULL;
    mg_status st = mg_gpt_data_build(&d, &c);
    int32_t *ids = malloc(sizeof *ids * ((size_t)a->seq_length + 1));
    if (st == MG_OK && !ids) st = MG_FAIL(MG_ERR_NOMEM, "cannot allocate a sample");
    if (st == MG_OK) {
        int64_t len = mg_gpt_data_len(d, a->show), k = a->first < len ? a->first : len;
        int epochs = mg_gpt_data_num_epochs(d, a->show);
        if (a->json)
            printf("{\"split\": \"%s\", \"len\": %" PRId64 ", \"num_epochs\": %d, \"samples\": [",
                   k_splits[a->show], len, epochs);
        else
            printf("%s: %" PRId64 " samples of %d + 1 tokens, %d epoch%s\n", k_splits[a->show], len,
                   a->seq_length, epochs, epochs == 1 ? "" : "s");
        for (int64_t i = 0; i < k && st == MG_OK; i++) {
            st = mg_gpt_data_sample(d, a->show, i, ids);
            if (st != MG_OK) break;
            if (a->json)
                fputs(i ? ", [" : "[", stdout);
            else
                printf("sample %" PRId64 ":", i);
            for (int j = 0; j <= a->seq_length; j++)
                printf(a->json ? "%s%d" : "%s%d", a->json && j ? ", " : a->json ? "" : " ", ids[j]);
            if (a->json)
                fputs("]", stdout);
            else
                putchar('\n');
            if (tok) print_text(tok, ids, (size_t)a->seq_length + 1);
        }
        if (a->json && st == MG_OK) puts("]}");
        fflush(stdout);
    }
    free(ids);
    mg_gpt_data_free(d);
    mg_tokenizer_free(tok);
    return st;
}

static mg_status data_run(mg_cli_context *cx) {
    MG_CHECK(check_args(cx->args, &cx->flags));
    return show(cx->args);
}

const mg_cli_command mg_cli_data = {sizeof(data_args), data_prepare, data_run};
