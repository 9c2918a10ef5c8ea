/*
 * WebP through libwebp, as Pillow's WebPImagePlugin decodes it (its _webp module, over libwebp
 * and libwebpdemux): a still image is one WebPDecode to RGB (fancy upsampling, libwebp's
 * default; alpha, if any, dropped as convert('RGB') drops it); an animation is its first frame on
 * the canvas through WebPAnimDecoder, which starts from a transparent black canvas.
 *
 * A caller may ask for a window of a still image (`out_buffer` sets it): libwebp's cropping then
 * converts only the columns around it, from the rows around it to the last row (so that data cut
 * short below the window is refused as a whole decode refuses it). The decoded area starts at
 * even coordinates and extends SK_WEBP_MARGIN pixels past the window where the image goes on (the
 * chroma that fancy upsampling reads), and only the window is copied out, so its pixels are a full
 * decode's.
 *
 * Called from webp.rs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

enum { SK_WEBP_OK = 0, SK_WEBP_ERROR = 1, SK_WEBP_REJECTED = 3 };

enum { SK_WEBP_MARGIN = 4 };

/* Copies rows [y, y + h) and columns [x, x + w) of an image with `channels` bytes a pixel and
 * rows `stride` apart to a packed RGB window. */
static void shk_copy_rgb(const uint8_t *src, size_t stride, int channels, unsigned x, unsigned y,
                        unsigned w, unsigned h, uint8_t *out) {
  for (unsigned row = 0; row < h; row++) {
    const uint8_t *s = src + (size_t)(y + row) * stride + (size_t)x * (size_t)channels;
    uint8_t *o = out + (size_t)row * w * 3;
    if (channels == 3) {
      memcpy(o, s, (size_t)w * 3);
    } else {
      for (unsigned i = 0; i < w; i++) {
        o[3 * i] = s[channels * i];
        o[3 * i + 1] = s[channels * i + 1];
        o[3 * i + 2] = s[channels * i + 2];
      }
    }
  }
}

static int shk_first_frame(const uint8_t *data, size_t size, const unsigned *window,
                          uint8_t *pixels, int *code) {
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return SK_WEBP_ERROR;
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  WebPData webp = {data, size};
  WebPAnimDecoder *dec = WebPAnimDecoderNew(&webp, &options);
  if (!dec) {
    *code = VP8_STATUS_BITSTREAM_ERROR;
    return SK_WEBP_ERROR;
  }
  WebPAnimInfo info;
  uint8_t *canvas = NULL;
  int timestamp = 0;
  int status = SK_WEBP_ERROR;
  if (WebPAnimDecoderGetInfo(dec, &info) && window[0] + window[2] <= info.canvas_width &&
      window[1] + window[3] <= info.canvas_height &&
      WebPAnimDecoderGetNext(dec, &canvas, &timestamp)) {
    shk_copy_rgb(canvas, (size_t)info.canvas_width * 4, 4, window[0], window[1], window[2],
                window[3], pixels);
    status = SK_WEBP_OK;
  } else {
    *code = VP8_STATUS_BITSTREAM_ERROR;
  }
  WebPAnimDecoderDelete(dec);
  return status;
}

/*
 * `out_buffer(ctx, width, height, window)` returns where to write the window's RGB rows
 * (window[2] * 3 bytes each, window[3] of them), or NULL to stop (status SK_WEBP_REJECTED).
 * `window` (left, top, width, height) is the whole image on entry; the callback may narrow it.
 * `code` receives libwebp's VP8StatusCode for SK_WEBP_ERROR (0 when it gave none).
 */
int shk_webp_decode(const uint8_t *data, size_t size,
                         uint8_t *(*out_buffer)(void *, unsigned, unsigned, unsigned *), void *ctx,
                         int *code) {
  WebPDecoderConfig config;
  *code = 0;
  if (!WebPInitDecoderConfig(&config)) return SK_WEBP_ERROR;
  VP8StatusCode features = WebPGetFeatures(data, size, &config.input);
  if (features != VP8_STATUS_OK) {
    *code = features;
    return SK_WEBP_ERROR;
  }
  unsigned width = (unsigned)config.input.width, height = (unsigned)config.input.height;
  unsigned window[4] = {0, 0, width, height};
  uint8_t *pixels = out_buffer(ctx, width, height, window);
  if (!pixels) return SK_WEBP_REJECTED;
  if (config.input.has_animation) return shk_first_frame(data, size, window, pixels, code);

  unsigned left = window[0] > SK_WEBP_MARGIN ? (window[0] - SK_WEBP_MARGIN) & ~1u : 0;
  unsigned top = window[1] > SK_WEBP_MARGIN ? (window[1] - SK_WEBP_MARGIN) & ~1u : 0;
  unsigned right = width - window[0] - window[2] > SK_WEBP_MARGIN
                       ? window[0] + window[2] + SK_WEBP_MARGIN
                       : width;
  /* Every row below the window is decoded too: libwebp stops reading at the crop's last row,
   * so data cut short (or damaged) below it would decode where a whole decode, Pillow's, fails. */
  unsigned bottom = height;
  int whole = left == 0 && top == 0 && right == width && bottom == height;
  int direct = window[0] == 0 && window[1] == 0 && window[2] == width && window[3] == height;
  uint8_t *decoded = direct ? pixels : malloc((size_t)(right - left) * (bottom - top) * 3);
  if (!decoded) return SK_WEBP_ERROR;
  if (!whole) {
    config.options.use_cropping = 1;
    config.options.crop_left = (int)left;
    config.options.crop_top = (int)top;
    config.options.crop_width = (int)(right - left);
    config.options.crop_height = (int)(bottom - top);
  }
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = decoded;
  config.output.u.RGBA.stride = (int)((right - left) * 3);
  config.output.u.RGBA.size = (size_t)(right - left) * (bottom - top) * 3;
  VP8StatusCode status = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  if (status == VP8_STATUS_OK && !direct) {
    shk_copy_rgb(decoded, (size_t)(right - left) * 3, 3, window[0] - left, window[1] - top,
                window[2], window[3], pixels);
  }
  if (!direct) free(decoded);
  *code = status;
  return status == VP8_STATUS_OK ? SK_WEBP_OK : SK_WEBP_ERROR;
}
