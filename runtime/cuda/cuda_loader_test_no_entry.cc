// A shared object that is not a CUDA plugin (for cuda_loader_test).
extern "C" int trainc_not_a_plugin() { return 42; }
