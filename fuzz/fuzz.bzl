"""pw_fuzzer: a libFuzzer target, its replay binary and its regression test.

pw_fuzzer(name = "x_fuzzer", corpus = "x", srcs = [...], deps = [...]) defines

  :x_fuzzer                  `tools/bazel run --config=fuzz //fuzz:x_fuzzer -- -max_total_time=60`
                             fuzzes from the seeds in corpus/x (run_fuzzer.sh); without
                             --config=fuzz (g++, no libFuzzer) it replays the files it is given.
  :x_fuzzer_bin              the binary itself (libFuzzer under --config=fuzz, else replay_main).
  :x_fuzzer_regression_test  runs every seed of corpus/x and every input of regressions/x (the
                             crashes found so far, fixed) through the target, in the normal suite.
"""

def pw_fuzzer(name, corpus, srcs, deps):
    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps,
        alwayslink = True,
    )
    native.cc_binary(
        name = name + "_bin",
        testonly = True,
        deps = [":" + name + "_lib"] + select({
            ":fuzz_on": [],
            "//conditions:default": [":replay_main"],
        }),
        linkopts = select({
            ":fuzz_on": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    seeds = native.glob(["corpus/" + corpus + "/**"])
    regressions = native.glob(["regressions/" + corpus + "/**"])
    native.sh_binary(
        name = name,
        testonly = True,
        srcs = ["run_fuzzer.sh"],
        args = [
            "$(location :" + name + "_bin)",
            native.package_name() + "/corpus/" + corpus,
            name,
        ],
        data = [":" + name + "_bin"] + seeds,
    )
    native.cc_test(
        name = name + "_regression_test",
        size = "small",
        deps = [":" + name + "_lib", ":replay_main"],
        args = [
            native.package_name() + "/corpus/" + corpus,
            native.package_name() + "/regressions/" + corpus,
        ],
        data = seeds + regressions,
    )
