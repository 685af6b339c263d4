#include "core/utf8.h"

int mg_utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c >= 0xc2 && c <= 0xdf)
        need = 1;
    else if (c >= 0xe0 && c <= 0xef)
        need = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return -1;
    size_t j = 1;
    int got = 0;
    if (j < n && s[j] >= lo && s[j] <= hi) {
        j++, got++;
        while (got < need && j < n && (s[j] & 0xc0) == 0x80) j++, got++;
    }
    return got == need ? (int)j : -(int)j;
}

size_t mg_utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int k = mg_utf8_seq(s + i, n - i);
        if (k < 0) return i;
        i += (size_t)k;
    }
    return n;
}

size_t mg_utf8_invalid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n && mg_utf8_valid_prefix(s + i, n - i < 4 ? n - i : 4) == 0) i++;
    return i;
}
