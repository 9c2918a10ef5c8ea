/*
 * JPEG decoding with the libjpeg API of the vendored libjpeg-turbo, driven the way Pillow's
 * decoder (libImaging/JpegDecode.c) drives it, so that the same files decode to the same pixels
 * and the same files are refused:
 *
 * - warnings (extraneous bytes before a marker, corrupt entropy data, a damaged restart marker...)
 *   are ignored and decoding goes on, as libjpeg does when the application lets it;
 * - the source never has more data than the file: where libjpeg asks for more, Pillow's decoder
 *   suspends and ImageFile.load raises "image file is truncated". Here that is status
 *   SK_JPEG_TRUNCATED. The one exception, as in Pillow: once every scanline is out, a suspension
 *   while finishing (a missing EOI marker) is not an error;
 * - the output colour space follows the number of components (1: grey, 3: RGB, 4: CMYK as stored),
 *   with libjpeg's defaults otherwise (accurate integer DCT, fancy upsampling).
 *
 * A caller may ask for a window of the image (`out_buffer` sets it): then only the rows and
 * columns around it go through the IDCT, upsampling and colour conversion (libjpeg-turbo's
 * jpeg_crop_scanline and jpeg_skip_scanlines), and every pixel of the window is the one a full
 * decode gives, because the decoded area extends SK_JPEG_MARGIN iMCUs past the window on each
 * side (the context that fancy upsampling and progressive block smoothing read) and only the
 * window is copied out. The entropy-coded data below the window is still read, so the same
 * truncated or corrupt files are refused as by a full decode, except where what is left provably
 * ends at the EOI (shk_rest_ends_at_eoi).
 *
 * Called from jpeg.rs; everything libjpeg longjmps over is C.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jpeglib.h"

enum { SK_JPEG_OK = 0, SK_JPEG_ERROR = 1, SK_JPEG_TRUNCATED = 2, SK_JPEG_REJECTED = 3 };

/* iMCUs decoded beyond the window on each side: fancy upsampling reads one chroma sample past a
 * pixel, libjpeg-turbo's block smoothing two blocks; one more for good measure. */
enum { SK_JPEG_MARGIN = 3 };

struct shk_error {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  /* Set by the source when data runs out where suspending is not allowed (jpeg_skip_scanlines
   * needs a source that never suspends): the decode ends as truncated. */
  int truncated;
};

static void shk_error_exit(j_common_ptr cinfo) {
  longjmp(((struct shk_error *)cinfo->err)->jump, 1);
}

static void shk_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void shk_init_source(j_decompress_ptr cinfo) { (void)cinfo; }

/* No more data will come: suspend, as Pillow's decoder does at the end of what it was given. */
static boolean shk_fill_input_buffer(j_decompress_ptr cinfo) {
  (void)cinfo;
  return FALSE;
}

/* The same for a windowed decode, where suspending is not allowed: the decode stops there, as
 * truncated (what a suspension at the same point means in a full decode). */
static boolean shk_fill_input_buffer_or_stop(j_decompress_ptr cinfo) {
  struct shk_error *err = (struct shk_error *)cinfo->err;
  err->truncated = 1;
  longjmp(err->jump, 1);
}

static void shk_skip_input_data(j_decompress_ptr cinfo, long num_bytes) {
  struct jpeg_source_mgr *src = cinfo->src;
  if (num_bytes <= 0) return;
  if ((size_t)num_bytes > src->bytes_in_buffer) {
    /* Past the end: the next read suspends. */
    src->next_input_byte += src->bytes_in_buffer;
    src->bytes_in_buffer = 0;
  } else {
    src->next_input_byte += num_bytes;
    src->bytes_in_buffer -= (size_t)num_bytes;
  }
}

static void shk_term_source(j_decompress_ptr cinfo) { (void)cinfo; }

/*
 * Whether the rows below a window may be left undecoded without changing which files are
 * refused. A file is refused when its data runs out before the last row; reading to the end
 * also meets the markers jpeg_finish_decompress reads. In a single-scan, Huffman-coded image
 * without restart intervals the entropy decoder reads the data in order and stops at the first
 * marker it meets (the rest of the rows then decode as zeros, a warning): when that marker is
 * the EOI, the data cannot run out and finishing reads nothing else, so the outcome is known
 * without decoding the rows. Any other case (progressive or multi-scan files, whose data is all
 * read by jpeg_start_decompress; arithmetic coding; restart markers; another marker first; no
 * marker at all, as in a truncated file) is read to the end as before.
 */
static int shk_rest_ends_at_eoi(j_decompress_ptr cinfo) {
  if (cinfo->arith_code || cinfo->restart_interval != 0 || jpeg_has_multiple_scans(cinfo))
    return 0;
  if (cinfo->unread_marker != 0) return cinfo->unread_marker == JPEG_EOI;
  const JOCTET *p = cinfo->src->next_input_byte;
  const JOCTET *end = p + cinfo->src->bytes_in_buffer;
  /* A marker is 0xFF followed by a byte other than 0x00 (a stuffed data byte) or 0xFF (fill). */
  while ((p = memchr(p, 0xFF, (size_t)(end - p))) != NULL && end - p >= 2) {
    if (p[1] != 0x00 && p[1] != 0xFF) return p[1] == JPEG_EOI;
    p++;
  }
  return 0;
}

/*
 * `out_buffer(ctx, width, height, components, window)` returns where to write the window's rows
 * (window[2] * components bytes each, window[3] of them), or NULL to stop (status
 * SK_JPEG_REJECTED). `window` (left, top, width, height) is the whole image on entry; the
 * callback may narrow it, if `may_window`. `message` receives libjpeg's text for SK_JPEG_ERROR.
 */
int shk_jpeg_decode(const unsigned char *data, size_t size, int may_window,
                         unsigned char *(*out_buffer)(void *, unsigned, unsigned, int, unsigned *),
                         void *ctx, char *message, size_t message_size) {
  struct jpeg_decompress_struct cinfo;
  struct shk_error err;
  struct jpeg_source_mgr src;
  /* volatile: read after a longjmp. */
  volatile int status = SK_JPEG_OK;
  unsigned char *volatile row = NULL;

  memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = shk_error_exit;
  err.pub.output_message = shk_output_message;
  err.truncated = 0;
  if (setjmp(err.jump)) {
    free(row);
    if (err.truncated) {
      jpeg_destroy_decompress(&cinfo);
      return SK_JPEG_TRUNCATED;
    }
    char text[JMSG_LENGTH_MAX];
    (*cinfo.err->format_message)((j_common_ptr)&cinfo, text);
    snprintf(message, message_size, "%s", text);
    jpeg_destroy_decompress(&cinfo);
    return SK_JPEG_ERROR;
  }
  jpeg_create_decompress(&cinfo);
  src.init_source = shk_init_source;
  src.fill_input_buffer = shk_fill_input_buffer;
  src.skip_input_data = shk_skip_input_data;
  src.resync_to_restart = jpeg_resync_to_restart;
  src.term_source = shk_term_source;
  src.next_input_byte = data;
  src.bytes_in_buffer = size;
  cinfo.src = &src;

  int ok;
  do {
    ok = jpeg_read_header(&cinfo, FALSE);
  } while (ok == JPEG_HEADER_TABLES_ONLY);
  if (ok == JPEG_SUSPENDED) {
    status = SK_JPEG_TRUNCATED;
    goto done;
  }
  int components = cinfo.num_components;
  switch (components) {
    case 1: cinfo.out_color_space = JCS_GRAYSCALE; break;
    case 3: cinfo.out_color_space = JCS_RGB; break;
    case 4: cinfo.out_color_space = JCS_CMYK; break;
    default:
      snprintf(message, message_size, "cannot handle %d-layer images", components);
      status = SK_JPEG_ERROR;
      goto done;
  }
  /* Before jpeg_start_decompress, which buffers a whole progressive image. */
  unsigned width = cinfo.image_width, height = cinfo.image_height;
  unsigned window[4] = {0, 0, width, height};
  unsigned char *pixels = out_buffer(ctx, width, height, components, window);
  if (!pixels) {
    status = SK_JPEG_REJECTED;
    goto done;
  }
  if (!jpeg_start_decompress(&cinfo)) {
    status = SK_JPEG_TRUNCATED;
    goto done;
  }
  if (cinfo.output_width != width || cinfo.output_height != height) {
    snprintf(message, message_size, "output size differs from the frame header");
    status = SK_JPEG_ERROR;
    goto done;
  }
  size_t window_stride = (size_t)window[2] * (size_t)components;
  if (!may_window || (window[2] == width && window[3] == height)) {
    while (cinfo.output_scanline < height) {
      JSAMPROW out = pixels + (size_t)cinfo.output_scanline * window_stride;
      if (jpeg_read_scanlines(&cinfo, &out, 1) != 1) {
        status = SK_JPEG_TRUNCATED;
        goto done;
      }
    }
  } else {
    cinfo.src->fill_input_buffer = shk_fill_input_buffer_or_stop;
    unsigned imcu_w = (unsigned)cinfo.max_h_samp_factor * DCTSIZE;
    unsigned imcu_h = (unsigned)cinfo.max_v_samp_factor * DCTSIZE;
    unsigned margin_w = SK_JPEG_MARGIN * imcu_w, margin_h = SK_JPEG_MARGIN * imcu_h;
    JDIMENSION left = window[0] > margin_w ? window[0] - margin_w : 0;
    JDIMENSION right = width - window[0] - window[2] > margin_w ? window[0] + window[2] + margin_w
                                                                 : width;
    JDIMENSION decoded_width = right - left;
    jpeg_crop_scanline(&cinfo, &left, &decoded_width); /* moves left to an iMCU boundary */
    row = malloc((size_t)cinfo.output_width * (size_t)components);
    if (!row) {
      snprintf(message, message_size, "out of memory");
      status = SK_JPEG_ERROR;
      goto done;
    }
    unsigned first = window[1] > margin_h ? window[1] - margin_h : 0;
    jpeg_skip_scanlines(&cinfo, first);
    size_t skip = (size_t)(window[0] - left) * (size_t)components;
    while (cinfo.output_scanline < window[1] + window[3]) {
      JDIMENSION y = cinfo.output_scanline;
      JSAMPROW out = row;
      if (jpeg_read_scanlines(&cinfo, &out, 1) != 1) {
        status = SK_JPEG_TRUNCATED;
        goto done;
      }
      if (y >= window[1]) {
        memcpy(pixels + (size_t)(y - window[1]) * window_stride, row + skip, window_stride);
      }
    }
    /* The rest is read, so that a file truncated below the window is refused as by a full
     * decode, unless what is left ends at the EOI (shk_rest_ends_at_eoi). jpeg_skip_scanlines
     * reads no data at all when asked to skip to the bottom of the image: all but the last row
     * are skipped (their entropy-coded data read), and the last one decoded. */
    if (cinfo.output_scanline < height && !shk_rest_ends_at_eoi(&cinfo)) {
      jpeg_skip_scanlines(&cinfo, height - 1 - cinfo.output_scanline);
      JSAMPROW out = row;
      if (jpeg_read_scanlines(&cinfo, &out, 1) != 1) {
        status = SK_JPEG_TRUNCATED;
        goto done;
      }
    }
    if (cinfo.output_scanline < height) goto done; /* Known to end at the EOI: nothing to finish. */
    cinfo.src->fill_input_buffer = shk_fill_input_buffer;
  }
  /* A suspension here (no EOI) is fine once every line is out, as in Pillow. */
  (void)jpeg_finish_decompress(&cinfo);
done:
  free(row);
  jpeg_destroy_decompress(&cinfo);
  return status;
}
