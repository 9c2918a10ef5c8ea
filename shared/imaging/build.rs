//! Compiles src/jpeg.c against the headers of the libjpeg-turbo that turbojpeg-sys builds (its
//! `links = "turbojpeg"` metadata gives the include directory); the library itself is linked by
//! turbojpeg-sys.
//!
//! Builds libtiff 4.7.2 — the release Pillow 13's wheels carry, from third_party/libtiff — with
//! CMake, compiles src/tiff.c against it and links it statically with its codecs (Debian's static
//! zlib, libdeflate, zstd, lzma, JBIG-KIT, Lerc and libwebp, from libtiff-dev's dependencies,
//! installed by scripts/setup), so that the binaries need no libtiff where they run and decode
//! damaged files as Pillow's libtiff does (Debian's 4.5 decodes some fax-coded ones otherwise).
//! Its JPEG codec calls the libjpeg API of the libjpeg-turbo that turbojpeg-sys builds (the same
//! decoder as src/jpeg.c, and the family Pillow's own libtiff uses).

use std::path::{Path, PathBuf};
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
        "libtiff's codecs are missing (pkg-config libtiff-4): run scripts/setup, \
         or apt-get install libtiff-dev",
    );
    let libtiff = build_libtiff(&include);
    let mut tiff = cc::Build::new();
    tiff.include(libtiff.join("include"));
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
    println!(
        "cargo:rustc-link-search=native={}",
        libtiff.join("lib").display()
    );
    println!("cargo:rustc-link-search=native={libdir}");
    // libtiff's codecs (what pkg-config --static libtiff-4 lists), libjpeg left to turbojpeg-sys.
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

/// libtiff from third_party/libtiff, built into OUT_DIR (static, no tools, tests or docs); its
/// install prefix (include/, lib/).
fn build_libtiff(turbojpeg_include: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third_party/libtiff");
    println!("cargo:rerun-if-changed={}", src.display());
    // turbojpeg-sys's headers (jpeglib.h, jconfig.h) and its static library beside them.
    let jpeg_include = turbojpeg_include
        .split(',')
        .map(PathBuf::from)
        .find(|d| d.join("jpeglib.h").exists())
        .expect("turbojpeg-sys's include directories hold jpeglib.h");
    let prefix = jpeg_include
        .parent()
        .expect("an include directory's parent");
    let jpeg_lib = ["lib", "lib64"]
        .iter()
        .map(|d| prefix.join(d).join("libturbojpeg.a"))
        .find(|p| p.exists())
        .expect("turbojpeg-sys's libturbojpeg.a beside its headers");
    let mut cfg = cmake::Config::new(&src);
    for (option, value) in [
        ("BUILD_SHARED_LIBS", "OFF"),
        ("tiff-tools", "OFF"),
        ("tiff-tests", "OFF"),
        ("tiff-contrib", "OFF"),
        ("tiff-docs", "OFF"),
        ("tiff-cxx", "OFF"),
        ("tiff-opengl", "OFF"),
        ("sphinx", "OFF"),
        ("zlib", "ON"),
        ("libdeflate", "ON"),
        ("pixarlog", "ON"),
        ("lzma", "ON"),
        ("zstd", "ON"),
        ("webp", "ON"),
        ("lerc", "ON"),
        ("jbig", "ON"),
        ("jpeg", "ON"),
        ("old-jpeg", "ON"),
        // turbojpeg-sys's libjpeg, not a system one found through its CMake package.
        ("jpeg-prefer-standard", "ON"),
        ("CMAKE_POSITION_INDEPENDENT_CODE", "ON"),
        ("CMAKE_INSTALL_LIBDIR", "lib"),
    ] {
        cfg.define(option, value);
    }
    cfg.define("JPEG_INCLUDE_DIR", &jpeg_include)
        .define("JPEG_LIBRARY", &jpeg_lib)
        .profile("Release")
        .build()
}
