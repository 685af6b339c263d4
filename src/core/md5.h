/* MD5 (RFC 1321), for naming cache files the way Megatron does (hashlib.md5 of a description).
 * Not for security. Exports: mg_md5, mg_md5_hex. Needs: nothing. */
#ifndef MG_CORE_MD5_H
#define MG_CORE_MD5_H

#include <stddef.h>
#include <stdint.h>

void mg_md5(const void *data, size_t len, uint8_t digest[16]);
/* The 32 lowercase hex digits of the digest and a NUL, as hashlib's hexdigest(). */
void mg_md5_hex(const void *data, size_t len, char hex[33]);

#endif
