/* UTF-8 well-formedness, byte by byte, as Unicode defines it: what the tokenizers' byte-level
 * decoding replaces with U+FFFD and where their text runs split.
 * Exports: mg_utf8_seq, mg_utf8_valid_prefix, mg_utf8_invalid_prefix. Needs: nothing. */
#ifndef MG_CORE_UTF8_H
#define MG_CORE_UTF8_H

#include <stddef.h>

/* The UTF-8 sequence at s[0] (n >= 1 bytes): its length (1..4) when well-formed (no overlongs,
 * surrogates or code points past U+10FFFF), else minus the length of its maximal ill-formed
 * subpart (Unicode's "maximal subpart", what one U+FFFD replaces). */
int mg_utf8_seq(const unsigned char *s, size_t n);
/* Bytes of s[0..n) that form valid UTF-8, from the start; and the bytes before the next valid
 * character. */
size_t mg_utf8_valid_prefix(const unsigned char *s, size_t n);
size_t mg_utf8_invalid_prefix(const unsigned char *s, size_t n);

#endif
