/* The pieces of Megatron's GPT dataset building, each against hand-computed or Python-computed
 * values: --split and --data-path parsing, numpy's normalisation sum, the epoch plan with its
 * 0.80 separate-last-epoch rule, the sample index walk, blending indices, .npy files, MD5 and the
 * description's Python float formatting. */
#include "test.h"

#include "core/md5.h"
#include "core/status.h"
#include "data/blend.h"
#include "data/gpt_index.h"
#include "data/index_cache.h"
#include "data/npy.h"
#include "dataset_test_util.h"

#include <stdlib.h>
#include <string.h>

MG_TEST(dataset_md5_matches_rfc1321) {
    struct {
        const char *msg;
        size_t len;
        const char *hex;
    } cases[] = {{"", 0, "d41d8cd98f00b204e9800998ecf8427e"},
                 {"abc", 3, "900150983cd24fb0d6963f7d28e17f72"},
                 {NULL, 55, "ef1772b6dff9a122358552954ad0df65"}, /* 'a' x 55: one block */
                 {NULL, 56, "3b0c8ac703f828b04c6c197006d17218"}, /* 'a' x 56: two blocks */
                 {NULL, 64, "014842d480b571495a4a0363793f7367"}};
    char a[64], hex[33];
    memset(a, 'a', sizeof a);
    for (int i = 0; i < 5; i++) {
        mg_md5_hex(cases[i].msg ? cases[i].msg : a, cases[i].len, hex);
        MG_EXPECT(!strcmp(hex, cases[i].hex), "md5 case %d: %s, want %s", i, hex, cases[i].hex);
    }
    unsigned char big[1280];
    for (int i = 0; i < 1280; i++)
        big[i] = (unsigned char)(i % 256); /* Python: bytes(range(256))*5 */
    mg_md5_hex(big, sizeof big, hex);
    MG_EXPECT(!strcmp(hex, "82829f1f3f2bb0f18b25f278e5bba8bd"), "md5 of 1280 bytes: %s", hex);
}

MG_TEST(dataset_python_float_repr) {
    struct {
        double v;
        const char *s;
    } c[] = {{0.969, "0.969"},
             {0.9990000000000001, "0.9990000000000001"},
             {1e-5, "1e-05"},
             {1.5e-5, "1.5e-05"},
             {1e16, "1e+16"},
             {1.2345678901234568e+17, "1.2345678901234568e+17"},
             {0.0001, "0.0001"},
             {100.0, "100.0"},
             {0.1 + 0.2, "0.30000000000000004"},
             {123456.789, "123456.789"},
             {1e22, "1e+22"},
             {5e-324, "5e-324"},
             {-0.0, "-0.0"},
             {1.0 / 3.0, "0.3333333333333333"},
             {1e15 + 0.5, "1000000000000000.5"},
             {-2.5, "-2.5"}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char buf[32];
        mg_py_float_repr(c[i].v, buf);
        MG_EXPECT(!strcmp(buf, c[i].s), "repr(%.17g): '%s', Python '%s'", c[i].v, buf, c[i].s);
    }
}

/* numpy.sum's pairwise order (values from numpy 2.4): differs from a left-to-right sum. */
MG_TEST(dataset_numpy_sum_is_pairwise) {
    double ten[10];
    for (int i = 0; i < 10; i++) ten[i] = 0.1;
    MG_EXPECT(mg_np_sum(ten, 10) == 1.0, "sum of ten 0.1: %.17g, numpy 1.0", mg_np_sum(ten, 10));
    double x[299];
    for (int i = 1; i < 300; i++) x[i - 1] = 0.1 * i + 1e-3 * i * i;
    MG_EXPECT(mg_np_sum(x, 299) == 13440.05, "299 values: %.17g, numpy 13440.05",
              mg_np_sum(x, 299));
    double m[10] = {1e16, 1.0, -1e16, 1.0, 3.5, 2.25, 1.0, 1e-3, 7.0, 0.3};
    MG_EXPECT(mg_np_sum(m, 10) == 14.051, "cancellation: %.17g, numpy 14.051", mg_np_sum(m, 10));
    double w[2] = {30, 70};
    mg_normalize(w, 2, w);
    MG_EXPECT(w[0] == 0.3 && w[1] == 0.7, "normalize 30, 70: %.17g %.17g", w[0], w[1]);
}

MG_TEST(dataset_split_parse_as_megatron) {
    mg_split s;
    int64_t b, e;
    MG_EXPECT_OK(mg_split_parse(&s, "969, 30, 1"));
    const int64_t want[3][2] = {{0, 969}, {969, 999}, {999, 1000}};
    for (int i = 0; i < 3; i++) {
        mg_split_range(&s, i, 1000, &b, &e);
        MG_EXPECT(s.present[i] && b == want[i][0] && e == want[i][1], "split %d: [%lld, %lld)", i,
                  (long long)b, (long long)e);
    }
    MG_EXPECT(s.matrix[1][1] == 0.969 + 0.03, "book-ends are cumulative sums");
    MG_EXPECT_OK(mg_split_parse(&s, "99,1")); /* missing weights are 0: no test split */
    MG_EXPECT(s.present[0] && s.present[1] && !s.present[2], "99,1 has no test split");
    MG_EXPECT_OK(mg_split_parse(&s, "1,0,1"));
    mg_split_range(&s, 1, 10, &b, &e);
    MG_EXPECT(!s.present[1] && b == e, "zero weight: absent");
    MG_EXPECT_OK(mg_split_parse(&s, "-1,2,3")); /* re.findall("[.0-9]+") drops the minus */
    MG_EXPECT(s.vector[0] == 1.0 / 6.0, "-1 reads as 1: %.17g", s.vector[0]);
    /* int(round(0.5 * 5)) = round(2.5) = 2 (half to even), round(0.5 * 3) = 2 */
    MG_EXPECT_OK(mg_split_parse(&s, "1,1"));
    mg_split_range(&s, 0, 5, &b, &e);
    MG_EXPECT(b == 0 && e == 2, "2.5 rounds to 2, got %lld", (long long)e);
    mg_split_range(&s, 0, 3, &b, &e);
    MG_EXPECT(e == 2, "1.5 rounds to 2, got %lld", (long long)e);
    MG_EXPECT_OK(mg_split_parse(&s, ".5 .5 0"));
    MG_EXPECT(s.vector[0] == 0.5 && !s.present[2], ".5 is a number");

    MG_EXPECT_ERROR(mg_split_parse(&s, "0,0,0"), MG_ERR_USAGE, "--split '0,0,0' gives no data");
    MG_EXPECT_ERROR(mg_split_parse(&s, "abc"), MG_ERR_USAGE, "gives no data to any split");
    MG_EXPECT_ERROR(mg_split_parse(&s, "1,2,3,4"), MG_ERR_USAGE, "has more than three weights");
    MG_EXPECT_ERROR(mg_split_parse(&s, "1..2,3"), MG_ERR_USAGE, "'1..2' is not a number");
}

MG_TEST(dataset_blend_parse_as_megatron) {
    mg_blend b;
    MG_EXPECT_OK(mg_blend_parse(&b, "/data/corpus"));
    MG_EXPECT(b.n == 1 && !b.weights && !strcmp(b.prefixes[0], "/data/corpus"), "one prefix");
    mg_blend_free(&b);
    MG_EXPECT_OK(mg_blend_parse(&b, "A B C"));
    MG_EXPECT(b.n == 3 && !b.weights && !strcmp(b.prefixes[2], "C"), "odd count: prefixes");
    mg_blend_free(&b);
    MG_EXPECT_OK(mg_blend_parse(&b, "A B"));
    MG_EXPECT(b.n == 2 && !b.weights, "even count, no numbers: prefixes");
    mg_blend_free(&b);
    MG_EXPECT_OK(mg_blend_parse(&b, "  30 A\t70  B "));
    MG_EXPECT(b.n == 2 && b.weights && b.weights[0] == 0.3 && b.weights[1] == 0.7 &&
                  !strcmp(b.prefixes[0], "A") && !strcmp(b.prefixes[1], "B"),
              "weights normalised, prefixes paired");
    mg_blend_free(&b);
    MG_EXPECT_OK(mg_blend_parse(&b, "1_0 A 3e1 B +.5 C"));
    MG_EXPECT(b.n == 3 && b.weights[0] == 10 / 40.5 && b.weights[1] == 30 / 40.5, "float() forms");
    mg_blend_free(&b);
    MG_EXPECT_OK(mg_blend_parse(&b, "1 A"));
    MG_EXPECT(b.n == 1 && b.weights && b.weights[0] == 1.0, "one weighted prefix stays weighted");
    mg_blend_free(&b);

    MG_EXPECT_ERROR(mg_blend_parse(&b, "0.3 A x B"), MG_ERR_USAGE,
                 "blend weight 'x' (entry 3) is not a number");
    MG_EXPECT_ERROR(mg_blend_parse(&b, "0.3 A 0.7"), MG_ERR_USAGE,
                 "--data-path has 3 entries starting with the weight '0.3'");
    MG_EXPECT_ERROR(mg_blend_parse(&b, "0 A 0 B"), MG_ERR_USAGE, "weights must be positive");
    MG_EXPECT_ERROR(mg_blend_parse(&b, "1 A -1 B"), MG_ERR_USAGE, "weights must be positive");
    MG_EXPECT_ERROR(mg_blend_parse(&b, "nan A 1 B"), MG_ERR_USAGE, "weights must be positive");
    MG_EXPECT_ERROR(mg_blend_parse(&b, "   "), MG_ERR_USAGE, "--data-path needs a dataset prefix");
    MG_EXPECT(b.n == 0 && !b.prefixes, "a failed parse leaves nothing to free");
}

MG_TEST(dataset_epoch_plan_and_final_epoch_threshold) {
    mg_gpt_epoch_plan p;
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 10, -1, 4)); /* None: one epoch, (10 - 1) / 4 samples */
    MG_EXPECT(p.num_epochs == 1 && p.num_samples == 2 && !p.separate_final_epoch, "one epoch");
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 10, 0, 4)); /* 0 samples still builds one epoch */
    MG_EXPECT(p.num_epochs == 1 && p.num_samples == 2, "0 samples: one epoch");
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 10, 5, 4)); /* 5 * 4 + 1 = 21 tokens: 3 epochs */
    MG_EXPECT(p.num_epochs == 3 && p.num_samples == 7, "3 epochs, (30 - 1) / 4 = 7 samples");
    /* 100 tokens, L = 4: 24 samples per epoch, threshold int(0.8 * 24) = 19. Two epochs give
     * (100 - 1) / 4 = 24 samples before the last one. */
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 100, 42, 4)); /* 18 from the final epoch < 19 */
    MG_EXPECT(p.num_epochs == 2 && p.separate_final_epoch && p.samples_sans_final == 24 &&
                  p.num_samples == 49,
              "42 samples: separate (%d, sans %lld)", p.separate_final_epoch,
              (long long)p.samples_sans_final);
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 100, 43, 4)); /* 19 is not < 19 */
    MG_EXPECT(p.num_epochs == 2 && !p.separate_final_epoch, "43 samples: not separate");
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 100, 25, 4)); /* 101 tokens: exactly past one epoch */
    MG_EXPECT(p.num_epochs == 2 && p.separate_final_epoch, "25 samples: 2 epochs, separate");
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 100, 24, 4)); /* 97 tokens fit one epoch */
    MG_EXPECT(p.num_epochs == 1, "24 samples: one epoch");
    MG_EXPECT_ERROR(mg_gpt_plan_epochs(&p, 100, 5, 1), MG_ERR_USAGE,
                 "--seq-length must be at least 2");
    MG_EXPECT_ERROR(mg_gpt_plan_epochs(&p, 1, 4000000000LL, 1000), MG_ERR_USAGE, "epochs");
}

/* Documents of 3, 5 and 2 tokens in the order 1, 0, 2 (5, 3, 2 tokens), L = 4: sample 0 is
 * document 1 [0, 5): ends at offset 4; sample 1 is doc 1 [4], doc 0, doc 2 [0]: ends at 2/0. */
MG_TEST(dataset_sample_index_hand_computed) {
    const int32_t sizes[3] = {3, 5, 2}, doc[3] = {1, 0, 2};
    mg_gpt_epoch_plan p;
    MG_EXPECT_OK(mg_gpt_plan_epochs(&p, 10, -1, 4));
    for (int wide = 0; wide < 2; wide++) {
        mg_npy s;
        MG_EXPECT_OK(mg_gpt_build_sample_index(sizes, doc, 3, 4, &p, wide, &s));
        const int64_t want[6] = {0, 0, 0, 4, 2, 0};
        MG_EXPECT(s.shape[0] == 3 && s.shape[1] == 2 && s.dtype == (wide ? MG_NPY_I8 : MG_NPY_I4),
                  "shape (3, 2)");
        for (int i = 0; i < 6; i++)
            MG_EXPECT(mg_npy_get(&s, i) == want[i], "entry %d: %lld, want %lld", i,
                      (long long)mg_npy_get(&s, i), (long long)want[i]);
        mg_npy_free(&s);
    }
    MG_EXPECT(!mg_gpt_sample_index_is_int64(2147483647LL, 5), "int32 up to 2^31 - 1");
    MG_EXPECT(mg_gpt_sample_index_is_int64(2147483648LL, 5), "int64 above");
    MG_EXPECT(!mg_gpt_shuffle_index_is_int64(4294967293LL), "uint32 below 2^32 - 2");
    MG_EXPECT(mg_gpt_shuffle_index_is_int64(4294967294LL), "int64 from 2^32 - 2");
}

/* build_blending_indices for weights 0.5/0.5: errors 0.5/0.5 (tie: first), then -0.5/0.5, ... */
MG_TEST(dataset_blending_indices_hand_computed) {
    const double w[2] = {0.5, 0.5};
    int16_t di[4];
    int64_t dsi[4];
    MG_EXPECT_OK(mg_blend_build_indices(w, 2, 4, di, dsi));
    const int16_t wd[4] = {0, 1, 0, 1};
    const int64_t ws[4] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++)
        MG_EXPECT(di[i] == wd[i] && dsi[i] == ws[i], "position %d: (%d, %lld)", i, di[i],
                  (long long)dsi[i]);
    /* exhaustive, sizes 1 and 3: weights .25/.75; s=0: .25 vs .75 -> 1; s=1: .25 vs -.25 -> 0
     * (dataset 0 spent); then dataset 1 twice */
    const int64_t sizes[2] = {1, 3};
    MG_EXPECT_OK(mg_blend_build_exhaustive(sizes, 2, di, dsi));
    const int16_t ed[4] = {1, 0, 1, 1};
    const int64_t es[4] = {0, 0, 1, 2};
    for (int i = 0; i < 4; i++)
        MG_EXPECT(di[i] == ed[i] && dsi[i] == es[i], "exhaustive %d: (%d, %lld)", i, di[i],
                  (long long)dsi[i]);
    /* per-dataset requests: 3 * 0.30000000000000004 = 0.9000000000000001 -> 1 -> ceil(1.005) */
    MG_EXPECT(mg_blend_dataset_size(3, 0.1 * 3, 0.0) == 1, "ceil of 0.9000000000000001");
    MG_EXPECT(mg_blend_dataset_size(3, 0.1 * 3, MG_BLEND_SURPLUS) == 2, "with the surplus");
    MG_EXPECT(mg_blend_dataset_size(100, 0.7, MG_BLEND_SURPLUS) == 71, "ceil(70 * 1.005)");
    MG_EXPECT(mg_blend_dataset_size(1000, 0.5, MG_BLEND_SURPLUS) == 503, "ceil(500 * 1.005)");
}

/* Our writer reproduces numpy.save byte for byte; the reader rejects damaged files. */
MG_TEST(dataset_npy_matches_numpy_bytes) {
    char dir[64];
    if (!ds_tmpdir(dir)) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    const char *golden[] = {
        DS_GOLDEN "/single_epochs/tokens_valid.npy", DS_GOLDEN "/numpy_random/raw_0.npy",
        DS_GOLDEN "/numpy_random/interval.npy", DS_GOLDEN "/numpy_random/shuffle_1_17.npy"};
    char path[128];
    snprintf(path, sizeof path, "%s/x.npy", dir);
    for (int i = 0; i < 4; i++) {
        mg_npy a;
        MG_EXPECT_OK(mg_npy_load(&a, golden[i]));
        if (!a.data) continue;
        MG_EXPECT_OK(mg_npy_save(path, a.dtype, a.ndim, a.shape, a.data));
        MG_EXPECT(ds_files_equal(path, golden[i]), "%s re-saved differs from numpy's bytes",
                  golden[i]);
        mg_npy_free(&a);
    }
    int16_t v[3] = {-1, 0, 32767};
    int64_t n = 3, zero = 0;
    MG_EXPECT_OK(mg_npy_save(path, MG_NPY_I2, 1, &n, v));
    mg_npy a;
    MG_EXPECT_OK(mg_npy_load(&a, path));
    MG_EXPECT(a.data && mg_npy_get(&a, 0) == -1 && mg_npy_get(&a, 2) == 32767, "int16 values");
    mg_npy_free(&a);
    MG_EXPECT_OK(mg_npy_save(path, MG_NPY_U4, 1, &zero, v));
    MG_EXPECT_OK(mg_npy_load(&a, path));
    MG_EXPECT(a.data && a.shape[0] == 0, "empty array");
    mg_npy_free(&a);
    /* truncated: one byte short */
    size_t len;
    char *bytes = ds_read_file(golden[1], &len);
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, len - 1, f);
    fclose(f);
    MG_EXPECT_ERROR(mg_npy_load(&a, path), MG_ERR_FORMAT, "truncated or corrupt");
    MG_EXPECT(a.data == NULL, "nothing loaded");
    memcpy(bytes + 10, "{'descr': '<f8'", 15); /* float64 is no index */
    f = fopen(path, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    MG_EXPECT_ERROR(mg_npy_load(&a, path), MG_ERR_FORMAT, "dtype '<f8' is not one of");
    f = fopen(path, "wb");
    fwrite("not numpy", 1, 9, f);
    fclose(f);
    MG_EXPECT_ERROR(mg_npy_load(&a, path), MG_ERR_FORMAT, "too short");
    free(bytes);
    ds_rmtree(dir);
}

/* Python's json.dumps(indent=4) layout. */
MG_TEST(dataset_description_json_layout) {
    mg_pyjson j;
    mg_pyjson_init(&j);
    mg_pyjson_begin(&j, '{');
    mg_pyjson_key(&j, "a");
    mg_pyjson_begin(&j, '[');
    mg_pyjson_int(&j, 0);
    mg_pyjson_float(&j, 0.5);
    mg_pyjson_null(&j);
    mg_pyjson_begin(&j, '[');
    mg_pyjson_end(&j, ']');
    mg_pyjson_end(&j, ']');
    mg_pyjson_key(&j, "s\"\\\n\x01\xc3\xa9\xf0\x9f\x98\x80");
    mg_pyjson_str(&j, "x");
    mg_pyjson_end(&j, '}');
    char *text = NULL;
    MG_EXPECT_OK(mg_pyjson_finish(&j, &text));
    /* json.dumps({"a": [0, 0.5, None, []], "s\"\\\n\x01é😀": "x"}, indent=4) */
    const char *want = "{\n    \"a\": [\n        0,\n        0.5,\n        null,\n        []\n"
                       "    ],\n    \"s\\\"\\\\\\n\\u0001\\u00e9\\ud83d\\ude00\": \"x\"\n}";
    MG_EXPECT(text && !strcmp(text, want), "got:\n%s\nwant:\n%s", text, want);
    free(text);
}
