/* Byte sizes: "10GiB", "1.5GB" or a whole number parsed (the one parser of
 * sizes: the config's KEY_BYTES keys and the CLI's size options), and written
 * back in the largest whole binary unit. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* "1MiB" when a whole number of binary units, else the plain number. */
void zo_config_fmt_bytes(size_t n, char *buf, size_t cap, bool quote) {
  static const struct { const char *unit; int shift; } units[] = {
    {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  const char *q = quote ? "\"" : "";
  if (n != 0) {
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      size_t unit = (size_t)1 << units[i].shift;
      if (n % unit == 0) {
        snprintf(buf, cap, "%s%zu%s%s", q, n / unit, units[i].unit, q);
        return;
      }
    }
  }
  snprintf(buf, cap, "%zu", n);
}

int zo_parse_bytes(const char *s, size_t *out) {
  static const struct { const char *unit; uint64_t mult; } units[] = {
    {"", 1}, {"b", 1},
    {"k", 1ull << 10}, {"kib", 1ull << 10}, {"kb", 1000ull},
    {"m", 1ull << 20}, {"mib", 1ull << 20}, {"mb", 1000000ull},
    {"g", 1ull << 30}, {"gib", 1ull << 30}, {"gb", 1000000000ull},
    {"t", 1ull << 40}, {"tib", 1ull << 40}, {"tb", 1000000000000ull},
  };
  ZO_ASSERT(s != NULL && out != NULL);
  const char *p = s;
  while (isspace((unsigned char)*p)) p++;
  if (!isdigit((unsigned char)*p)) goto out_bad;

  unsigned __int128 whole = 0, frac = 0, scale = 1;
  for (; isdigit((unsigned char)*p); p++) {
    whole = whole * 10 + (unsigned)(*p - '0');
    if (whole > (unsigned __int128)SIZE_MAX) goto out_bad;
  }
  bool has_frac = *p == '.';
  if (has_frac) {
    p++;
    if (!isdigit((unsigned char)*p)) goto out_bad;
    for (int n = 0; isdigit((unsigned char)*p); p++, n++) {
      if (n < 18) {
        frac = frac * 10 + (unsigned)(*p - '0');
        scale *= 10;
      }
    }
  }
  while (isspace((unsigned char)*p)) p++;
  char unit[4];
  size_t n = 0;
  for (; isalpha((unsigned char)*p) && n < sizeof unit - 1; p++)
    unit[n++] = (char)tolower((unsigned char)*p);
  unit[n] = '\0';
  while (isspace((unsigned char)*p)) p++;
  if (*p != '\0') goto out_bad;

  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (strcmp(unit, units[i].unit) != 0) continue;
    uint64_t mult = units[i].mult;
    if (has_frac && mult == 1) goto out_bad;
    /* whole <= SIZE_MAX and frac < scale <= 1e18, so neither product wraps 128 bits. */
    unsigned __int128 bytes = whole * mult + (frac * mult + scale / 2) / scale;
    if (bytes > (unsigned __int128)SIZE_MAX) goto out_bad;
    *out = (size_t)bytes;
    return 0;
  }

out_bad:
  return zo_error(-EINVAL, "\"%s\" is not a byte size: write a whole number of bytes or a "
                  "number with a unit, e.g. \"10GiB\", \"512MiB\", \"1.5GB\"", s);
}
