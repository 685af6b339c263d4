/* `megatron preprocess`: Megatron-LM's tools/preprocess_data.py flags in front of
 * data/preprocess.c, parsed through the flag table (config/flags_command.h: --help, closest-flag
 * suggestions). Flag errors are one line, exit 2; a Megatron flag or value this build recognises
 * but cannot run (--split-sentences, another tokenizer) exits 1. The tokenizers are
 * data/tokenizer.h's. */
#include "cli/cli.h"

#include "config/flags_command.h"
#include "core/status.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *input, *output_prefix, *tokenizer_type, *vocab_file, *merge_file, *model;
    char json_keys[1024]; /* --json-keys K [K...], space-joined */
    int workers, partitions;
    int64_t log_interval;
    bool append_eod, strict, no_special_tokens;
} pre_args;

static const char usage[] =
    "usage: megatron preprocess --input FILE.jsonl --output-prefix P --tokenizer-type T\n"
    "                           (--vocab-file encoder.json --merge-file vocab.bpe | "
    "--tokenizer-model PATH) [flags]\n\n"
    "Turns JSON lines into Megatron indexed datasets P_<key>_document.bin/.idx,\n"
    "byte-identical to Megatron-LM's tools/preprocess_data.py.\n";

enum { G_IO, G_TOKENIZER, G_RUN, G_NOT_HERE };
static const char *const groups[] = {"input and output", "tokenizer", "run",
                                     "Megatron's flags not supported here"};
#define ARG(f)         MG_FLAG_FIELD(pre_args, f)
#define NOT_HERE(why_) MG_FLAG_GROUP(G_NOT_HERE), .status = MG_FLAG_NOT_YET, .why = why_
#define SPLITTING      "(no NLTK sentence splitting or worker search here); drop it"
static const mg_flag_spec flags[] = {
    {"--input", MG_FLAG_GROUP(G_IO), .kind = MG_FLAG_STRING_REF, ARG(input), .arg = "FILE",
     .def = "required", .help = "JSONL, one JSON object per line"},
    {"--json-keys", MG_FLAG_GROUP(G_IO), .kind = MG_FLAG_STRING_LIST, ARG(json_keys),
     .arg = "K [K...]", .help = "keys to extract, one output per key"},
    {"--output-prefix", MG_FLAG_GROUP(G_IO), .kind = MG_FLAG_STRING_REF, ARG(output_prefix),
     .arg = "P", .def = "required", .help = "output path prefix"},
    {"--tokenizer-type", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF,
     ARG(tokenizer_type), .arg = "T", .def = "required", .help = MG_TOKENIZER_TYPES},
    {"--vocab-file", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(vocab_file),
     .arg = "F", .help = "GPT-2 encoder.json (GPT2BPETokenizer)"},
    {"--merge-file", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(merge_file),
     .arg = "F", .help = "GPT-2 vocab.bpe (GPT2BPETokenizer)"},
    {"--tokenizer-model", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_STRING_REF, ARG(model),
     .arg = "P",
     .help = "tokenizer.json or its directory (HuggingFaceTokenizer), a SentencePiece .model"},
    {"--tokenizer-hf-no-include-special-tokens", MG_FLAG_GROUP(G_TOKENIZER), .kind = MG_FLAG_BOOL,
     ARG(no_special_tokens), .help = "HuggingFaceTokenizer: no BOS/EOS from the post-processor"},
    {"--append-eod", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_BOOL, ARG(append_eod),
     .help = "end every non-empty document with the tokenizer's EOD"},
    {"--workers", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_INT, ARG(workers), .arg = "N",
     .help = "tokenizing threads, in [1, 1024]"},
    {"--log-interval", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_INT64, ARG(log_interval), .arg = "N",
     .help = "progress line every N documents"},
    {"--strict", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_BOOL, ARG(strict),
     .help = "stop at the first invalid line (default: skip and count)"},
    {"--partitions", MG_FLAG_GROUP(G_RUN), .kind = MG_FLAG_INT, ARG(partitions), .arg = "N",
     .help = "1 only: use --workers for parallelism"},
    {"--split-sentences", .kind = MG_FLAG_BOOL, NOT_HERE(SPLITTING), .help = "NLTK splitting"},
    {"--keep-newlines", .kind = MG_FLAG_BOOL, MG_FLAG_GROUP(G_NOT_HERE), .status = MG_FLAG_IGNORED,
     .help = "matters only with --split-sentences"},
    {"--lang", .kind = MG_FLAG_STRING, MG_FLAG_GROUP(G_NOT_HERE), .status = MG_FLAG_IGNORED,
     .arg = "L", .help = "matters only with --split-sentences"},
    {"--keep-sequential-samples", .kind = MG_FLAG_BOOL, MG_FLAG_GROUP(G_NOT_HERE),
     .status = MG_FLAG_IGNORED, .help = "matters only with --partitions > 1"},
    {"--find-optimal-num-workers", .kind = MG_FLAG_BOOL, NOT_HERE(SPLITTING),
     .help = "worker search"},
    {"--workers-to-check", .kind = MG_FLAG_STRING, .arg = "N...", NOT_HERE(SPLITTING),
     .help = "worker search"},
    {"--max-documents", .kind = MG_FLAG_STRING, .arg = "N", NOT_HERE(SPLITTING),
     .help = "worker search"},
    {"--tokenizer-special-tokens", .kind = MG_FLAG_STRING, .arg = "T",
     NOT_HERE("(the tokenizer's own special tokens are used); drop it"),
     .help = "extra special tokens"},
    {"--tokenizer-sentencepiece-legacy", .kind = MG_FLAG_BOOL,
     NOT_HERE("(the tokenizer's own special tokens are used); drop it"),
     .help = "SentencePiece legacy mode"},
    {"--vocab-extra-ids", .kind = MG_FLAG_STRING, .arg = "N",
     NOT_HERE("(the tokenizer's own special tokens are used); drop it"), .help = "T5 extra ids"},
};
#undef ARG
#undef NOT_HERE
#undef SPLITTING

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

/* The parsed flags into c (the keys point into a->json_keys, split in place). */
static mg_status to_config(pre_args *a, mg_preprocess_config *c) {
    if (a->workers < 1 || a->workers > 1024)
        return MG_FAIL(MG_ERR_USAGE, "--workers expects an integer in [1, 1024], got '%d'",
                       a->workers);
    if (a->log_interval < 1)
        return MG_FAIL(MG_ERR_USAGE, "--log-interval expects a positive integer, got %lld",
                       (long long)a->log_interval);
    if (a->partitions != 1)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "preprocess: --partitions %d is not supported (use --workers for "
                       "parallelism)",
                       a->partitions);
    c->input = a->input, c->output_prefix = a->output_prefix;
    c->tokenizer.type = a->tokenizer_type, c->tokenizer.vocab_file = a->vocab_file;
    c->tokenizer.merge_file = a->merge_file, c->tokenizer.model = a->model;
    c->tokenizer.no_special_tokens = a->no_special_tokens;
    c->append_eod = a->append_eod, c->strict = a->strict;
    c->workers = a->workers, c->log_interval = a->log_interval;
    c->num_keys = 0;
    for (char *k = strtok(a->json_keys, " "); k; k = strtok(NULL, " ")) {
        if (c->num_keys == MG_JSONL_MAX_KEYS)
            return MG_FAIL(MG_ERR_USAGE, "preprocess: at most %d --json-keys", MG_JSONL_MAX_KEYS);
        c->json_keys[c->num_keys++] = k;
    }
    if (c->num_keys == 0)
        return MG_FAIL(MG_ERR_USAGE, "preprocess: --json-keys expects at least one key");
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
    for (int x = 0; x < c->num_keys; x++)
        for (int y = x + 1; y < c->num_keys; y++)
            if (!strcmp(c->json_keys[x], c->json_keys[y]))
                return MG_FAIL(MG_ERR_USAGE, "preprocess: --json-keys names '%s' twice",
                               c->json_keys[x]);
    return MG_OK;
}

static void pre_prepare(mg_cli_context *cx) {
    pre_args *a = cx->args;
    *a = (pre_args){.json_keys = "text", .workers = 1, .partitions = 1, .log_interval = 1000};
    cx->flags = MG_FLAG_COMMAND("preprocess", usage, flags, groups, a);
}

static mg_status pre_run(mg_cli_context *cx) {
    mg_preprocess_config c;
    memset(&c, 0, sizeof c);
    MG_CHECK(to_config(cx->args, &c));
    mg_preprocess_stats s;
    MG_CHECK(mg_preprocess_run(&c, &s, stderr));
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
    return MG_OK;
}

const mg_cli_command mg_cli_preprocess = {sizeof(pre_args), pre_prepare, pre_run};
