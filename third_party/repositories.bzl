"""The system packages pipewright builds against, as repositories (WORKSPACE only).

pipewright_repositories() declares @eigen, @openblas, @blis, @mpi and @cuda where Debian
installs them (system_repo.bzl: an absent package becomes a stub whose targets are
incompatible, never an error). pipewright's own WORKSPACE calls it, and so does the WORKSPACE
of a project that uses pipewright as an external repository (README, "Use it in your project"):

    load("@pipewright//third_party:repositories.bzl", "pipewright_repositories")
    pipewright_repositories()

The build files are named by Label, so they resolve to this repository in both cases.
"""

load(":system_repo.bzl", "system_repo")

def pipewright_repositories():
    system_repo(
        name = "eigen",
        build_file = Label("//third_party/eigen:eigen.BUILD"),
        paths = ["/usr/include/eigen3"],
    )
    system_repo(
        name = "openblas",
        build_file = Label("//third_party/openblas:openblas.BUILD"),
        paths = ["/usr/include/x86_64-linux-gnu/openblas-pthread"],
    )
    system_repo(
        name = "blis",
        build_file = Label("//third_party/blis:blis.BUILD"),
        paths = ["/usr/include/x86_64-linux-gnu/blis-openmp"],
    )
    system_repo(
        name = "mpi",
        build_file = Label("//third_party/mpi:mpi.BUILD"),
        paths = ["/usr/lib/x86_64-linux-gnu/openmpi"],
    )
    system_repo(
        name = "cuda",
        build_file = Label("//third_party/cuda:cuda.BUILD"),
        env_var = "CUDA_PATH",
        paths = ["/usr/local/cuda"],
    )
