//! Compiles src/jpeg.c against the headers of the libjpeg-turbo that turbojpeg-sys builds (its
//! `links = "turbojpeg"` metadata gives the include directory); the library itself is linked by
//! turbojpeg-sys.

fn main() {
    println!("cargo:rerun-if-changed=src/jpeg.c");
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
        .compile("shardkit_jpeg");
}
