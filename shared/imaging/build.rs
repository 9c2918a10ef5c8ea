//! Compiles src/jpeg.c against the headers of the libjpeg-turbo that turbojpeg-sys builds (its
//! `links = "turbojpeg"` metadata gives the include directory); the library itself is linked by
//! turbojpeg-sys.
//!
//! Compiles src/tiff.c against Debian's libtiff (libtiff-dev, installed by scripts/setup) and links
//! libtiff and its codecs statically, so that the binaries need no libtiff where they run. Its JPEG
//! codec calls the libjpeg API, which the vendored libjpeg-turbo provides (the same decoder as
//! src/jpeg.c, and the family Pillow's own libtiff uses).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/jpeg.c");
    println!("cargo:rerun-if-changed=src/tiff.c");
    println!("cargo:rerun-if-changed=src/webp.c");
    let include = std::env::var("DEP_TURBOJPEG_INCLUDE")
        .expect("turbojpeg-sys gives its include directory (DEP_TURBOJPEG_INCLUDE)");
    let mut build = cc::Build::new();
    for dir in include.split(',') {
        build.include(dir);
    }
    build
        .file("src/jpeg.c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("shardkit_jpeg");

    let pkg = |what: &str| {
        Command::new("pkg-config")
            .args([what, "libtiff-4"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let libdir = pkg("--variable=libdir").expect(
        "libtiff's development files are missing (pkg-config libtiff-4): run scripts/setup, \
         or apt-get install libtiff-dev",
    );
    let mut tiff = cc::Build::new();
    if let Some(dir) = pkg("--variable=includedir") {
        tiff.include(dir);
    }
    tiff.file("src/tiff.c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("shardkit_tiff");
    // WebP through Debian's libwebp (libwebp-dev, which libtiff-dev brings), as Pillow decodes
    // it; linked statically below with libtiff's codecs.
    let mut webp = cc::Build::new();
    if let Some(dir) = pkg("--variable=includedir") {
        webp.include(dir);
    }
    webp.file("src/webp.c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("shardkit_webp");
    println!("cargo:rustc-link-search=native={libdir}");
    // Debian's libtiff 4.5 codecs (pkg-config --static libtiff-4), libjpeg left to turbojpeg-sys.
    for lib in [
        "tiff",
        "webpdemux",
        "webp",
        "Lerc",
        "jbig",
        "zstd",
        "lzma",
        "deflate",
        "z",
    ] {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    // Lerc is C++.
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
