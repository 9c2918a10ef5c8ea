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
 * Called from decode.rs; everything libjpeg longjmps over is C.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "jpeglib.h"

enum { SK_JPEG_OK = 0, SK_JPEG_ERROR = 1, SK_JPEG_TRUNCATED = 2, SK_JPEG_REJECTED = 3 };

struct sk_error {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
};

static void sk_error_exit(j_common_ptr cinfo) {
  longjmp(((struct sk_error *)cinfo->err)->jump, 1);
}

static void sk_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void sk_init_source(j_decompress_ptr cinfo) { (void)cinfo; }

/* No more data will come: suspend, as Pillow's decoder does at the end of what it was given. */
static boolean sk_fill_input_buffer(j_decompress_ptr cinfo) {
  (void)cinfo;
  return FALSE;
}

static void sk_skip_input_data(j_decompress_ptr cinfo, long num_bytes) {
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

static void sk_term_source(j_decompress_ptr cinfo) { (void)cinfo; }

/*
 * `out_buffer(ctx, width, height, components)` returns where to write height rows of
 * width * components bytes, or NULL to stop (status SK_JPEG_REJECTED). `message` receives
 * libjpeg's text for SK_JPEG_ERROR.
 */
int shardkit_jpeg_decode(const unsigned char *data, size_t size,
                         unsigned char *(*out_buffer)(void *, unsigned, unsigned, int), void *ctx,
                         char *message, size_t message_size) {
  struct jpeg_decompress_struct cinfo;
  struct sk_error err;
  struct jpeg_source_mgr src;
  /* volatile: read after a longjmp. */
  volatile int status = SK_JPEG_OK;

  memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = sk_error_exit;
  err.pub.output_message = sk_output_message;
  if (setjmp(err.jump)) {
    char text[JMSG_LENGTH_MAX];
    (*cinfo.err->format_message)((j_common_ptr)&cinfo, text);
    snprintf(message, message_size, "%s", text);
    jpeg_destroy_decompress(&cinfo);
    return SK_JPEG_ERROR;
  }
  jpeg_create_decompress(&cinfo);
  src.init_source = sk_init_source;
  src.fill_input_buffer = sk_fill_input_buffer;
  src.skip_input_data = sk_skip_input_data;
  src.resync_to_restart = jpeg_resync_to_restart;
  src.term_source = sk_term_source;
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
  unsigned char *pixels = out_buffer(ctx, width, height, components);
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
  size_t stride = (size_t)width * (size_t)components;
  while (cinfo.output_scanline < height) {
    JSAMPROW row = pixels + (size_t)cinfo.output_scanline * stride;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      status = SK_JPEG_TRUNCATED;
      goto done;
    }
  }
  /* A suspension here (no EOI) is fine once every line is out, as in Pillow. */
  (void)jpeg_finish_decompress(&cinfo);
done:
  jpeg_destroy_decompress(&cinfo);
  return status;
}
