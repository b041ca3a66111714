# Third-party libraries, all from the distribution's packages (see README).
find_package(hwy REQUIRED)            # Google Highway: SIMD with runtime ISA dispatch
find_package(dlpack REQUIRED)         # DLPack: tensors to and from PyTorch, JAX, CuPy (header only)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(CLI11 REQUIRED)          # command-line parsing (tools only)
find_package(nlohmann_json REQUIRED)  # JSON output of the benchmarks (tools only)
find_package(fmt REQUIRED)            # formatting (tools only)
find_package(Threads REQUIRED)
