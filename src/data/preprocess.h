/* JSONL documents -> Megatron indexed datasets, as Megatron's tools/preprocess_data.py (one
 * partition, no sentence splitting): every line is one document; for each --json-keys key the
 * value's text (or each sentence of an array value) is tokenized; sentences that give no tokens
 * are dropped; with --append-eod a non-empty document gets the end-of-document token at the end of
 * its last sentence; a document with no tokens is still recorded (a document of zero sequences,
 * i.e. a repeated document index). Output PREFIX_<key>_document.bin/.idx with Megatron's optimal
 * dtype for the vocabulary, byte-identical to Megatron's for the same input.
 *
 * N worker threads tokenize batches of lines while the calling thread reads the input and writes
 * finished batches in input order, so the output does not depend on N.
 * Invalid lines (see data/jsonl.h) are skipped and counted (Megatron would crash on them); with
 * strict, the first one is an MG_ERR_FORMAT error naming the file, the line and the column.
 *
 * Exports: mg_preprocess_config, mg_preprocess_stats, mg_preprocess_run.
 * Needs: data/jsonl, data/tokenizer, data/indexed_dataset, pthreads. */
#ifndef MG_DATA_PREPROCESS_H
#define MG_DATA_PREPROCESS_H

#include "core/status.h"
#include "data/jsonl.h"
#include "data/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *input;                        /* --input FILE.jsonl */
    const char *output_prefix;                /* --output-prefix */
    const char *json_keys[MG_JSONL_MAX_KEYS]; /* --json-keys (default "text") */
    int num_keys;
    mg_tokenizer_spec tokenizer; /* --tokenizer-type, --vocab-file, --merge-file, ... */
    bool append_eod;             /* --append-eod */
    bool strict;                 /* --strict: the first invalid line is an error */
    int workers;                 /* --workers: tokenizing threads (>= 1) */
    int64_t log_interval;        /* --log-interval: progress every N documents (1000) */
} mg_preprocess_config;

typedef struct {
    int64_t lines;              /* lines read */
    int64_t documents;          /* documents written (valid lines) */
    int64_t invalid_lines;      /* skipped */
    int64_t first_invalid_line; /* 1-based; 0: none */
    char first_invalid[256];    /* "not JSON at column 7", "key 'text' missing", ... */
    int64_t tokens;             /* over all keys, EOD included */
    int64_t bytes;              /* input bytes */
    double seconds;             /* wall time of the whole run */
    char first_output[1100];    /* PREFIX_<key>_document of the first key */
} mg_preprocess_stats;

/* Runs the whole conversion. progress (may be NULL) gets Megatron-style "Processed N documents"
 * lines every log_interval documents or second. On failure no output file is left behind (the
 * writers go through temporary names). */
mg_status mg_preprocess_run(const mg_preprocess_config *c, mg_preprocess_stats *stats,
                            FILE *progress);

#endif
