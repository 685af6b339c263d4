/* `megatron preprocess`: Megatron-LM's tools/preprocess_data.py flags in front of
 * data/preprocess.c. Flag errors are one line, exit 2; a Megatron flag or value this build
 * recognises but cannot run (--split-sentences, another tokenizer) exits 1. The tokenizers are
 * data/tokenizer.h's. */
#include "cli/cli.h"

#include "core/status.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_flags[] = {"--input",
                                      "--output-prefix",
                                      "--json-keys",
                                      "--tokenizer-type",
                                      "--vocab-file",
                                      "--merge-file",
                                      "--tokenizer-model",
                                      "--tokenizer-hf-no-include-special-tokens",
                                      "--append-eod",
                                      "--workers",
                                      "--log-interval",
                                      "--strict",
                                      "--help",
                                      "--split-sentences",
                                      "--keep-newlines",
                                      "--lang",
                                      "--partitions",
                                      "--keep-sequential-samples",
                                      "--find-optimal-num-workers",
                                      "--workers-to-check",
                                      "--max-documents",
                                      "--tokenizer-special-tokens",
                                      "--tokenizer-sentencepiece-legacy",
                                      "--vocab-extra-ids"};

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: megatron preprocess --input FILE.jsonl --output-prefix P --tokenizer-type T\n"
        "                           (--vocab-file encoder.json --merge-file vocab.bpe | "
        "--tokenizer-model PATH) [flags]\n\n"
        "Turns JSON lines into Megatron indexed datasets P_<key>_document.bin/.idx,\n"
        "byte-identical to Megatron-LM's tools/preprocess_data.py.\n\n"
        "  --input FILE          JSONL, one JSON object per line\n"
        "  --json-keys K [K...]  keys to extract, one output per key (default: text)\n"
        "  --output-prefix P     output path prefix\n"
        "  --tokenizer-type T    GPT2BPETokenizer, HuggingFaceTokenizer, SentencePieceTokenizer,\n"
        "                        GPTSentencePieceTokenizer or Llama2Tokenizer\n"
        "  --vocab-file F        GPT-2 encoder.json (GPT2BPETokenizer)\n"
        "  --merge-file F        GPT-2 vocab.bpe (GPT2BPETokenizer)\n"
        "  --tokenizer-model P   tokenizer.json or its directory (HuggingFaceTokenizer), a\n"
        "                        SentencePiece .model (the SentencePiece types)\n"
        "  --tokenizer-hf-no-include-special-tokens\n"
        "                        HuggingFaceTokenizer: no BOS/EOS from the post-processor\n"
        "  --append-eod          end every non-empty document with the tokenizer's EOD\n"
        "  --workers N           tokenizing threads (default 1)\n"
        "  --log-interval N      progress line every N documents (default 1000)\n"
        "  --strict              stop at the first invalid line (default: skip and count)\n");
}

static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (lb >= 64) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up, row[j] = best;
        }
    }
    return row[lb];
}

static mg_status unknown_flag(const char *arg) {
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < sizeof k_flags / sizeof *k_flags; i++) {
        size_t d = edit_distance(arg, k_flags[i]);
        if (d < bd) bd = d, best = k_flags[i];
    }
    size_t limit = strlen(arg) / 3 > 2 ? strlen(arg) / 3 : 2;
    if (best && bd <= limit)
        return MG_FAIL(MG_ERR_USAGE, "preprocess: unknown flag '%s'; did you mean '%s'?", arg,
                       best);
    return MG_FAIL(MG_ERR_USAGE, "preprocess: unknown flag '%s'; see `megatron preprocess --help`",
                   arg);
}

static mg_status parse_int(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        return MG_FAIL(MG_ERR_USAGE, "preprocess: %s expects an integer in [%ld, %ld], got '%s'",
                       flag, lo, hi, v);
    *out = x;
    return MG_OK;
}

static int is_flag(const char *s) {
    return s[0] == '-' && s[1] == '-';
}

static mg_status check_tokenizer(const char *type) {
    static const char *const megatron_types[] = {
        "BertWordPieceLowerCase", "BertWordPieceCase",       "TikTokenizer", "MultimodalTokenizer",
        "NullTokenizer",          "NullMultimodalTokenizer", "SFTTokenizer"};
    if (!type)
        return MG_FAIL(MG_ERR_USAGE, "preprocess: --tokenizer-type is required (%s)",
                       MG_TOKENIZER_TYPES);
    if (mg_tokenizer_known_type(type)) return MG_OK;
    for (size_t i = 0; i < sizeof megatron_types / sizeof *megatron_types; i++)
        if (!strcmp(type, megatron_types[i]))
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "preprocess: --tokenizer-type %s is not supported yet; this build has "
                           "%s",
                           type, MG_TOKENIZER_TYPES);
    return MG_FAIL(MG_ERR_USAGE, "preprocess: unknown --tokenizer-type '%s'; this build has %s",
                   type, MG_TOKENIZER_TYPES);
}

/* Parses argv into c. `--flag value` and `--flag=value`; a flag given twice keeps the last. */
static mg_status parse(int argc, char **argv, mg_preprocess_config *c, int *help) {
    for (int i = 0; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *inline_val = NULL, *eq = strchr(arg, '=');
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return *help = 1, MG_OK;
        if (!is_flag(arg))
            return MG_FAIL(MG_ERR_USAGE,
                           "preprocess: unexpected argument '%s' (flags start "
                           "with --)",
                           arg);
        size_t nl = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nl >= sizeof name) return unknown_flag(arg);
        memcpy(name, arg, nl), name[nl] = 0;
        if (eq) inline_val = eq + 1;
        int boolean = !strcmp(name, "--append-eod") || !strcmp(name, "--strict") ||
                      !strcmp(name, "--tokenizer-hf-no-include-special-tokens") ||
                      !strcmp(name, "--tokenizer-sentencepiece-legacy") ||
                      !strcmp(name, "--split-sentences") || !strcmp(name, "--keep-newlines") ||
                      !strcmp(name, "--keep-sequential-samples") ||
                      !strcmp(name, "--find-optimal-num-workers");
        int known = 0;
        for (size_t k = 0; k < sizeof k_flags / sizeof *k_flags; k++)
            known |= !strcmp(name, k_flags[k]);
        if (!known) return unknown_flag(name);
        if (boolean && inline_val)
            return MG_FAIL(MG_ERR_USAGE, "preprocess: %s takes no value", name);
        if (!strcmp(name, "--json-keys")) { /* nargs='+' */
            c->num_keys = 0;
            if (inline_val) c->json_keys[c->num_keys++] = inline_val;
            while (i + 1 < argc && !is_flag(argv[i + 1])) {
                if (c->num_keys == MG_JSONL_MAX_KEYS)
                    return MG_FAIL(MG_ERR_USAGE, "preprocess: at most %d --json-keys",
                                   MG_JSONL_MAX_KEYS);
                c->json_keys[c->num_keys++] = argv[++i];
            }
            if (c->num_keys == 0)
                return MG_FAIL(MG_ERR_USAGE, "preprocess: --json-keys expects at least one key");
            continue;
        }
        const char *v = inline_val;
        if (!boolean && !v) {
            if (i + 1 >= argc || is_flag(argv[i + 1]))
                return MG_FAIL(MG_ERR_USAGE, "preprocess: %s expects a value", name);
            v = argv[++i];
        }
        long x;
        if (!strcmp(name, "--input"))
            c->input = v;
        else if (!strcmp(name, "--output-prefix"))
            c->output_prefix = v;
        else if (!strcmp(name, "--tokenizer-type"))
            c->tokenizer.type = v;
        else if (!strcmp(name, "--vocab-file"))
            c->tokenizer.vocab_file = v;
        else if (!strcmp(name, "--merge-file"))
            c->tokenizer.merge_file = v;
        else if (!strcmp(name, "--tokenizer-model"))
            c->tokenizer.model = v;
        else if (!strcmp(name, "--tokenizer-hf-no-include-special-tokens"))
            c->tokenizer.no_special_tokens = true;
        else if (!strcmp(name, "--tokenizer-special-tokens") ||
                 !strcmp(name, "--tokenizer-sentencepiece-legacy") ||
                 !strcmp(name, "--vocab-extra-ids"))
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "preprocess: %s is not supported (the tokenizer's own special tokens "
                           "are used)",
                           name);
        else if (!strcmp(name, "--append-eod"))
            c->append_eod = true;
        else if (!strcmp(name, "--strict"))
            c->strict = true;
        else if (!strcmp(name, "--workers")) {
            MG_CHECK(parse_int(name, v, 1, 1024, &x));
            c->workers = (int)x;
        } else if (!strcmp(name, "--log-interval")) {
            MG_CHECK(parse_int(name, v, 1, 1L << 40, &x));
            c->log_interval = x;
        } else if (!strcmp(name, "--partitions")) {
            MG_CHECK(parse_int(name, v, 1, 1 << 20, &x));
            if (x != 1)
                return MG_FAIL(MG_ERR_UNSUPPORTED,
                               "preprocess: --partitions %ld is not supported "
                               "(use --workers for parallelism)",
                               x);
        } else if (!strcmp(name, "--split-sentences") ||
                   !strcmp(name, "--find-optimal-num-workers") ||
                   !strcmp(name, "--workers-to-check") || !strcmp(name, "--max-documents"))
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "preprocess: %s is not supported (no NLTK "
                           "sentence splitting or worker search here)",
                           name);
        /* --keep-newlines, --lang, --keep-sequential-samples: only matter with options above */
    }
    if (!c->input) return MG_FAIL(MG_ERR_USAGE, "preprocess: --input is required");
    if (!c->output_prefix) return MG_FAIL(MG_ERR_USAGE, "preprocess: --output-prefix is required");
    const char *tokenizer = c->tokenizer.type;
    MG_CHECK(check_tokenizer(tokenizer));
    if (!mg_tokenizer_type_uses_model(tokenizer)) {
        if (!c->tokenizer.vocab_file)
            return MG_FAIL(MG_ERR_USAGE,
                           "preprocess: --vocab-file is required (GPT-2 encoder.json)");
        if (!c->tokenizer.merge_file)
            return MG_FAIL(MG_ERR_USAGE, "preprocess: --merge-file is required (GPT-2 vocab.bpe)");
    } else if (!c->tokenizer.model) {
        return MG_FAIL(
            MG_ERR_USAGE, "preprocess: --tokenizer-type %s needs --tokenizer-model %s", tokenizer,
            strcmp(tokenizer, "HuggingFaceTokenizer") ? "FILE.model" : "DIR or DIR/tokenizer.json");
    }
    for (int a = 0; a < c->num_keys; a++)
        for (int b = a + 1; b < c->num_keys; b++)
            if (!strcmp(c->json_keys[a], c->json_keys[b]))
                return MG_FAIL(MG_ERR_USAGE, "preprocess: --json-keys names '%s' twice",
                               c->json_keys[a]);
    return MG_OK;
}

int mg_cli_preprocess(int argc, char **argv) {
    mg_preprocess_config c;
    memset(&c, 0, sizeof c);
    c.json_keys[0] = "text", c.num_keys = 1, c.workers = 1, c.log_interval = 1000;
    int help = 0;
    mg_status st = parse(argc, argv, &c, &help);
    if (st != MG_OK) return mg_cli_report(st);
    if (help) {
        usage(stdout);
        return 0;
    }
    mg_preprocess_stats s;
    st = mg_preprocess_run(&c, &s, stderr);
    if (st != MG_OK) return mg_cli_report(st);
    double el = s.seconds > 1e-9 ? s.seconds : 1e-9;
    fprintf(stderr,
            "megatron preprocess: %lld documents, %lld tokens, %.2f MB in %.2f s (%.2f MB/s, "
            "%.0f docs/s, %d workers) -> %s.bin/.idx%s\n",
            (long long)s.documents, (long long)s.tokens, (double)s.bytes / 1048576.0, s.seconds,
            (double)s.bytes / el / 1048576.0, (double)s.documents / el, c.workers, s.first_output,
            c.num_keys > 1 ? " (and one per other key)" : "");
    if (s.invalid_lines)
        fprintf(stderr,
                "megatron preprocess: skipped %lld invalid line%s of %lld (first: line %lld: %s); "
                "--strict stops at the first\n",
                (long long)s.invalid_lines, s.invalid_lines == 1 ? "" : "s", (long long)s.lines,
                (long long)s.first_invalid_line, s.first_invalid);
    if (s.documents == 0)
        fprintf(stderr, "megatron preprocess: warning: no documents: the dataset is empty and "
                        "training will refuse it\n");
    return 0;
}
