-- Two BLAS threads for the matrix products (blas_threads).
blas_threads = 2
