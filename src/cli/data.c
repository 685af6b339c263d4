/* `megatron data`: builds the train/valid/test datasets of a --data-path exactly as training
 * does (Megatron's GPTDataset and BlendedDataset indices, cached like Megatron) and prints one
 * split's length, epochs and first samples: token ids, and the decoded text when the GPT-2
 * vocabulary is given. With --json, stdout is exactly one JSON object:
 *   {"split": "train", "len": N, "num_epochs": E, "samples": [[ids of sample 0], ...]}
 * Flag errors are one line on stderr, exit 2. */
#include "cli/cli.h"

#include "core/status.h"
#include "data/gpt_dataset.h"
#include "data/tokenizer_gpt2.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

typedef struct {
    char data_path[8192];
    const char *split, *cache, *vocab, *merges, *tokenizer;
    long long seq_length, seed, first, samples[3];
    int show;
    bool json;
} data_args;

static const char *const k_splits[3] = {"train", "valid", "test"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: megatron data --data-path [W] PREFIX ... --seq-length L [flags]\n\n"
            "Shows the samples Megatron's GPT dataset gives the model: the split's length,\n"
            "epochs and first samples (seq-length + 1 token ids each), built and cached as\n"
            "`megatron train` and Megatron-LM build them.\n\n"
            "  --data-path [W] PREFIX ...   a prefix, W1 P1 W2 P2 ... pairs, or prefixes\n"
            "  --split A,B,C                train,valid,test proportions (default 969, 30, 1)\n"
            "  --seq-length L               tokens per sample (each sample holds L + 1)\n"
            "  --seed S                     data order seed (default 1234)\n"
            "  --train-samples N            samples of each split; absent: one epoch\n"
            "  --valid-samples N\n"
            "  --test-samples N\n"
            "  --data-cache-path DIR        index cache (default PREFIX/cache/GPTDataset_indices)\n"
            "  --vocab-file F --merge-file F  GPT-2 vocabulary: also print the decoded text\n"
            "  --tokenizer-type T           GPT2BPETokenizer or NullTokenizer (ids only)\n"
            "  --show train|valid|test      the split to print (default train)\n"
            "  --first K                    how many samples to print (default 4)\n"
            "  --json                       one JSON object on stdout\n");
}

static mg_status int_value(const char *flag, const char *v, long long lo, long long hi,
                           long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return USAGE("data: %s expects an integer in [%lld, %lld], got '%s'", flag, lo, hi, v);
    *out = x;
    return MG_OK;
}

static mg_status parse(data_args *a, int argc, char **argv, bool *help) {
    memset(a, 0, sizeof *a);
    a->split = "969, 30, 1";
    a->seq_length = -1, a->seed = 1234, a->first = 4;
    a->samples[0] = a->samples[1] = a->samples[2] = -1;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            *help = true;
            return MG_OK;
        }
        if (!strcmp(f, "--json")) {
            a->json = true;
            continue;
        }
        if (!strcmp(f, "--data-path")) { /* argparse nargs='*': up to the next flag */
            size_t used = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                const char *v = argv[++i];
                if (used + strlen(v) + 2 > sizeof a->data_path)
                    return USAGE("data: --data-path values are too long");
                used += (size_t)sprintf(a->data_path + used, "%s%s", used ? " " : "", v);
            }
            if (!used) return USAGE("data: --data-path expects at least one prefix");
            continue;
        }
        const char *names[] = {"--split",         "--data-cache-path", "--vocab-file",
                               "--merge-file",    "--tokenizer-type",  "--seq-length",
                               "--seed",          "--first",           "--train-samples",
                               "--valid-samples", "--test-samples",    "--show"};
        int k = -1;
        for (int j = 0; j < 12; j++)
            if (!strcmp(f, names[j])) k = j;
        if (k < 0)
            return USAGE("data: unknown %s '%s'; see `megatron data --help`",
                         f[0] == '-' ? "flag" : "argument", f);
        if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))
            return USAGE("data: %s expects a value", f);
        const char *v = argv[++i];
        const char **strs[] = {&a->split, &a->cache, &a->vocab, &a->merges, &a->tokenizer};
        long long *ints[] = {&a->seq_length, &a->seed,       &a->first,
                             &a->samples[0], &a->samples[1], &a->samples[2]};
        if (k < 5)
            *strs[k] = v;
        else if (k == 5)
            MG_CHECK(int_value(f, v, 2, INT32_MAX, ints[0]));
        else if (k == 6)
            MG_CHECK(int_value(f, v, 0, UINT32_MAX, ints[1]));
        else if (k < 11)
            MG_CHECK(int_value(f, v, 0, INT64_MAX / 2, ints[k - 5]));
        else {
            a->show = -1;
            for (int s = 0; s < 3; s++)
                if (!strcmp(v, k_splits[s])) a->show = s;
            if (a->show < 0) return USAGE("data: --show expects train, valid or test, got '%s'", v);
        }
    }
    if (!a->data_path[0]) return USAGE("data: missing --data-path PREFIX");
    if (a->seq_length < 0) return USAGE("data: missing --seq-length L");
    if (a->tokenizer && strcmp(a->tokenizer, "GPT2BPETokenizer") &&
        strcmp(a->tokenizer, "NullTokenizer"))
        return USAGE("data: --tokenizer-type expects GPT2BPETokenizer or NullTokenizer, got '%s'",
                     a->tokenizer);
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

static mg_status run(const data_args *a) {
    mg_gpt_data_config c = {.data_path = a->data_path,
                            .split = a->split,
                            .seq_length = (int)a->seq_length,
                            .seed = (uint64_t)a->seed,
                            .cache_path = a->cache,
                            .num_samples = {a->samples[0], a->samples[1], a->samples[2]}};
    mg_tokenizer *tok = NULL;
    bool decode = !a->json && a->vocab && !(a->tokenizer && !strcmp(a->tokenizer, "NullTokenizer"));
    if (decode) MG_CHECK(mg_tokenizer_gpt2_load(&tok, a->vocab, a->merges));
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
            printf("%s: %" PRId64 " samples of %lld + 1 tokens, %d epoch%s\n", k_splits[a->show],
                   len, a->seq_length, epochs, epochs == 1 ? "" : "s");
        for (int64_t i = 0; i < k && st == MG_OK; i++) {
            st = mg_gpt_data_sample(d, a->show, i, ids);
            if (st != MG_OK) break;
            if (a->json)
                fputs(i ? ", [" : "[", stdout);
            else
                printf("sample %" PRId64 ":", i);
            for (long long j = 0; j <= a->seq_length; j++)
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

int mg_cli_data(int argc, char **argv) {
    data_args a;
    bool help = false;
    mg_status st = parse(&a, argc, argv, &help);
    if (st != MG_OK) return mg_cli_report(st);
    if (help) {
        usage(stdout);
        return 0;
    }
    return mg_cli_report(run(&a));
}
