/*
 * TIFF decoding through libtiff, the way Pillow's decoder (libImaging/TiffDecode.c,
 * ImagingLibTiffDecode) drives it, so that the same files give the same bytes and the same files
 * are refused:
 *
 * - the file is read from memory through client procedures that also map it, as Pillow's do;
 * - YCbCr images are read through libtiff's TIFFRGBAImage (subsampling, reference black and
 *   white handled by libtiff), except JPEG-compressed contiguous ones, for which libjpeg converts
 *   to RGB (TIFFTAG_JPEGCOLORMODE);
 * - everything else is read strip by strip or tile by tile, plane by plane, with Pillow's size
 *   checks against what its unpacker will read (`bits` is the bits per pixel of Pillow's raw mode).
 *
 * The rows land in one raster per plane, `row_bytes` apart; decode.rs unpacks them with Pillow's
 * raw mode. Warnings are ignored; the first error message is kept for the caller. Nothing prints.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

struct shk_tiff {
  TIFF *tif;
  const unsigned char *data;
  toff_t size, loc;
  char message[256];
};

static tmsize_t shk_read(thandle_t h, void *buf, tmsize_t n) {
  struct shk_tiff *t = (struct shk_tiff *)h;
  tmsize_t left;
  if (t->loc >= t->size) return 0;
  left = (tmsize_t)(t->size - t->loc);
  if (n > left) n = left;
  memcpy(buf, t->data + t->loc, (size_t)n);
  t->loc += (toff_t)n;
  return n;
}

static tmsize_t shk_write(thandle_t h, void *buf, tmsize_t n) {
  (void)h, (void)buf, (void)n;
  return 0;
}

static toff_t shk_seek(thandle_t h, toff_t off, int whence) {
  struct shk_tiff *t = (struct shk_tiff *)h;
  switch (whence) {
    case SEEK_SET: t->loc = off; break;
    case SEEK_CUR: t->loc += off; break;
    case SEEK_END: t->loc = t->size + off; break;
  }
  return t->loc;
}

static int shk_close(thandle_t h) {
  (void)h;
  return 0;
}

static toff_t shk_size(thandle_t h) { return ((struct shk_tiff *)h)->size; }

static int shk_map(thandle_t h, void **base, toff_t *size) {
  struct shk_tiff *t = (struct shk_tiff *)h;
  *base = (void *)t->data;
  *size = t->size;
  return 1;
}

static void shk_unmap(thandle_t h, void *base, toff_t size) { (void)h, (void)base, (void)size; }

/* The first error is the one worth reporting: later ones are usually its consequences. */
static int shk_on_error(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  struct shk_tiff *t = (struct shk_tiff *)user;
  (void)tif, (void)module;
  if (t->message[0] == 0) vsnprintf(t->message, sizeof t->message, fmt, ap);
  return 1;
}

static int shk_on_warning(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap) {
  (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
  return 1;
}

const char *shk_tiff_message(const struct shk_tiff *t) { return t->message; }

void shk_tiff_close(struct shk_tiff *t) {
  if (!t) return;
  if (t->tif) TIFFClose(t->tif);
  free(t);
}

static int shk_broken(struct shk_tiff *t, const char *why) {
  if (t->message[0] == 0) snprintf(t->message, sizeof t->message, "%s", why);
  return -1;
}

/* ImagingLibTiffDecode's first check: libtiff must read the size the caller's tags gave. */
static int shk_same_size(struct shk_tiff *t, uint32_t width, uint32_t height) {
  uint32_t w = 0, h = 0;
  if (!t->tif) return -1;
  TIFFGetField(t->tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(t->tif, TIFFTAG_IMAGELENGTH, &h);
  if (w != width || h != height) return shk_broken(t, "libtiff reads another size");
  return 0;
}

/*
 * Opens the first directory of the file. Returns NULL only when out of memory; otherwise a
 * handle whose `tif` may be NULL (the message says why), to be closed either way.
 */
struct shk_tiff *shk_tiff_open(const unsigned char *data, size_t size) {
  struct shk_tiff *t = calloc(1, sizeof *t);
  TIFFOpenOptions *opts;
  if (!t) return NULL;
  t->data = data;
  t->size = size;
  /* Errors that libtiff reports without a handle go nowhere (a library does not print). */
  TIFFSetErrorHandler(NULL);
  TIFFSetWarningHandler(NULL);
  opts = TIFFOpenOptionsAlloc();
  if (!opts) {
    free(t);
    return NULL;
  }
  TIFFOpenOptionsSetErrorHandlerExtR(opts, shk_on_error, t);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, shk_on_warning, t);
  t->tif = TIFFClientOpenExt("file.tif", "r", (thandle_t)t, shk_read, shk_write, shk_seek, shk_close,
                             shk_size, shk_map, shk_unmap, opts);
  TIFFOpenOptionsFree(opts);
  if (!t->tif && t->message[0] == 0) snprintf(t->message, sizeof t->message, "not a TIFF file");
  return t;
}

/* Pillow's _decodeAsRGBA: the whole image as libtiff's RGBA (top-left first), into `out`. */
int shk_tiff_read_rgba(struct shk_tiff *t, uint32_t width, uint32_t height, uint32_t *out) {
  TIFF *tif = t->tif;
  TIFFRGBAImage img;
  char emsg[1024] = "";
  uint32_t rows_per_block, y;
  int ret;
  if (shk_same_size(t, width, height)) return -1;
  if (TIFFIsTiled(tif))
    ret = TIFFGetFieldDefaulted(tif, TIFFTAG_TILELENGTH, &rows_per_block);
  else
    ret = TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_block);
  if (ret != 1 || rows_per_block == (uint32_t)-1 || rows_per_block == 0) rows_per_block = height;
  if (!(TIFFRGBAImageOK(tif, emsg) && TIFFRGBAImageBegin(&img, tif, 0, emsg))) {
    if (t->message[0] == 0)
      snprintf(t->message, sizeof t->message, "%.*s", (int)sizeof t->message - 1, emsg);
    return -1;
  }
  img.req_orientation = ORIENTATION_TOPLEFT;
  img.col_offset = 0;
  for (y = 0; y < height; y += rows_per_block) {
    uint32_t rows = rows_per_block < img.height - y ? rows_per_block : img.height - y;
    img.row_offset = (int)y;
    if (!TIFFRGBAImageGet(&img, out + (size_t)y * img.width, img.width, rows)) {
      TIFFRGBAImageEnd(&img);
      return -1;
    }
  }
  TIFFRGBAImageEnd(&img);
  return 0;
}

/*
 * A strip or tile buffer sized by the file's tags is bounded by the image it fills: at most
 * twice the decoded raster, or 16 MiB for small images (a 16x16 file claiming one 65536x65536
 * tile asked for 4 GB before any byte was read; Pillow stops within 16 MB).
 */
static int shk_too_big(struct shk_tiff *t, uint64_t buf, uint32_t height, int planes,
                       size_t row_bytes) {
  uint64_t raster = (uint64_t)planes * height * row_bytes;
  uint64_t limit = raster * 2 > ((uint64_t)16 << 20) ? raster * 2 : ((uint64_t)16 << 20);
  if (buf <= limit) return 0;
  snprintf(t->message, sizeof t->message,
           "a strip or tile of %llu bytes for an image of %llu bytes (damaged tags?)",
           (unsigned long long)buf, (unsigned long long)raster);
  return -1;
}

/* Pillow's _decodeStrip: strips of every plane, each row's first `row_bytes` bytes kept. */
static int shk_read_strips(struct shk_tiff *t, uint32_t width, uint32_t height, int planes,
                          unsigned bits, unsigned char *out, size_t row_bytes) {
  TIFF *tif = t->tif;
  uint32_t rows_per_strip, y, r;
  tmsize_t strip_size = TIFFStripSize(tif), scanline = TIFFScanlineSize(tif);
  uint64_t unpacker_row = ((uint64_t)width * bits / planes + 7) / 8;
  unsigned char *buf;
  int plane;
  if (TIFFGetField(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_strip) != 1 ||
      rows_per_strip == (uint32_t)-1)
    rows_per_strip = height;
  if (rows_per_strip == 0 || strip_size <= 0 || (uint64_t)strip_size > unpacker_row * rows_per_strip)
    return shk_broken(t, "strip size does not match the image");
  if (scanline == 0 || unpacker_row > (uint64_t)scanline || unpacker_row > row_bytes)
    return shk_broken(t, "scanline size does not match the image");
  if (shk_too_big(t, (uint64_t)strip_size, height, planes, row_bytes)) return -1;
  /* Zeroed, as Pillow's: a damaged fax strip can leave rows unwritten (libtiff stops filling
   * after a bad code word), and they must be white, not what the heap held. */
  buf = calloc(1, (size_t)strip_size);
  if (!buf) return shk_broken(t, "out of memory");
  for (y = 0; y < height; y += rows_per_strip) {
    for (plane = 0; plane < planes; plane++) {
      uint32_t rows = rows_per_strip < height - y ? rows_per_strip : height - y;
      if (TIFFReadEncodedStrip(tif, TIFFComputeStrip(tif, y, (uint16_t)plane), buf, strip_size) ==
          -1) {
        free(buf);
        return shk_broken(t, "cannot read a strip");
      }
      for (r = 0; r < rows; r++)
        memcpy(out + ((size_t)plane * height + y + r) * row_bytes, buf + (size_t)r * scanline,
               (size_t)unpacker_row);
    }
  }
  free(buf);
  return 0;
}

/* Pillow's _decodeTile: tiles of every plane, their rows placed at the tile's column. */
static int shk_read_tiles(struct shk_tiff *t, uint32_t width, uint32_t height, int planes,
                         unsigned bits, unsigned char *out, size_t row_bytes) {
  TIFF *tif = t->tif;
  uint32_t tile_width = 0, tile_length = 0, x, y, r;
  tmsize_t tile_size = TIFFTileSize(tif), tile_row = TIFFTileRowSize(tif);
  unsigned plane_bits = bits / (unsigned)planes;
  unsigned char *buf;
  int plane;
  if (tile_size == 0) return shk_broken(t, "cannot compute the tile size");
  if (tile_row == 0 || tile_row > tile_size) return shk_broken(t, "cannot compute the tile row size");
  TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tile_width);
  TIFFGetField(tif, TIFFTAG_TILELENGTH, &tile_length);
  if (tile_width == 0 || tile_length == 0) return shk_broken(t, "tiles of no size");
  if ((uint64_t)tile_size > (((uint64_t)tile_length * bits / planes + 7) / 8) * tile_width)
    return shk_broken(t, "tile size does not match the image");
  /* Tiles start on byte boundaries of the raster (tile widths are multiples of 16). */
  if (((uint64_t)tile_width * plane_bits) % 8 != 0) return shk_broken(t, "tile width not byte aligned");
  if (shk_too_big(t, (uint64_t)tile_size, height, planes, row_bytes)) return -1;
  buf = calloc(1, (size_t)tile_size);
  if (!buf) return shk_broken(t, "out of memory");
  for (y = 0; y < height; y += tile_length) {
    for (plane = 0; plane < planes; plane++) {
      for (x = 0; x < width; x += tile_width) {
        uint32_t w = tile_width < width - x ? tile_width : width - x;
        uint32_t rows = tile_length < height - y ? tile_length : height - y;
        size_t at = (size_t)((uint64_t)x * plane_bits / 8);
        size_t n = (size_t)(((uint64_t)w * plane_bits + 7) / 8);
        if (TIFFReadTile(tif, buf, x, y, 0, (uint16_t)plane) == -1) {
          free(buf);
          return shk_broken(t, "cannot read a tile");
        }
        if (n > (size_t)tile_row || at + n > row_bytes) {
          free(buf);
          return shk_broken(t, "tile rows do not match the image");
        }
        for (r = 0; r < rows; r++)
          memcpy(out + ((size_t)plane * height + y + r) * row_bytes + at, buf + (size_t)r * tile_row,
                 n);
      }
    }
  }
  free(buf);
  return 0;
}

/*
 * The image's samples as stored (after decompression), `planes` rasters of `height` rows of
 * `row_bytes` (at least Pillow's unpacker row: width * bits / planes bits). `jpeg_rgb` asks
 * libjpeg for RGB (YCbCr JPEG, contiguous).
 */
int shk_tiff_read(struct shk_tiff *t, uint32_t width, uint32_t height, int planes,
                       unsigned bits, int jpeg_rgb, unsigned char *out, size_t row_bytes) {
  if (shk_same_size(t, width, height)) return -1;
  if (jpeg_rgb && !TIFFSetField(t->tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
    return shk_broken(t, "cannot ask libjpeg for RGB");
  if (TIFFIsTiled(t->tif)) return shk_read_tiles(t, width, height, planes, bits, out, row_bytes);
  return shk_read_strips(t, width, height, planes, bits, out, row_bytes);
}
