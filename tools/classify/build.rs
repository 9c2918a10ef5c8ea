fn main() {
    torch_build::link_libtorch();
}
