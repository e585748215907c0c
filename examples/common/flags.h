// The command-line flags every Fashion-MNIST example shares (training, pipeline, data,
// output), bound to a TrainConfig. Each example adds the flags of its own model (--hidden,
// --width, ...) next to them.
//
//   TrainConfig config;                  // the example's defaults, which --help shows
//   CLI::App app{"Train ..."};
//   TrainFlags flags(app, config);
//   app.add_option("--hidden", config.hidden, "Hidden layer widths");
//   CLI11_PARSE(app, argc, argv);
//   flags.apply();                       // --checkpoint, --devices, --balance, --no-progress
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "examples/common/config.h"

namespace pipewright::examples {

/// Which groups of flags TrainFlags adds (or them together).
enum FlagGroups : unsigned {
  kCommonFlags = 1,    // --batch-size --lr --weight-decay --seed
  kEpochFlags = 2,     // --epochs --stop-after --lr-schedule --optimizer
  kPipelineFlags = 4,  // --workers --balance --chunks --checkpoint --schedule --virtual-stages
                       // --devices --threads
  kDataFlags = 8,      // --data-dir --train-limit --test-limit
  kFileFlags = 16,     // --save --resume --trace --trace-step --no-progress
  kAllFlags = 31,      // the Fashion-MNIST examples'
};

class TrainFlags {
 public:
  /// Adds the shared flags of `groups` to `app`, each defaulting to `config`'s value, and
  /// --version ("pipewright " and pipewright/version.h's PIPEWRIGHT_VERSION).
  TrainFlags(CLI::App& app, TrainConfig& config, unsigned groups = kAllFlags);
  TrainFlags(const TrainFlags&) = delete;
  TrainFlags& operator=(const TrainFlags&) = delete;

  /// After parsing: puts the flags given as text into the config, and makes the relative
  /// paths of --save, --resume and --trace relative to where `bazel run` was typed
  /// (user_path). Throws std::invalid_argument for a device or balance entry that does not
  /// parse (naming it).
  void apply();

 private:
  void add_pipeline_flags(CLI::App& app, TrainConfig& config);

  TrainConfig& config_;
  std::string checkpoint_;
  std::string precision_;
  std::string float32_matmul_precision_;
  std::string devices_;
  std::string balance_;
  std::string memory_cap_;
  bool no_progress_ = false;
};

/// For list options of widths (--hidden, --widths): checks each entry on its own, so that
/// "--hidden 1024 x" says "entry 'x' is not a whole number" instead of failing the whole list.
CLI::Validator whole_number_entries();

/// `bazel run` starts a binary inside its runfiles tree: a relative `path` is taken from the
/// directory the command was typed in (BUILD_WORKING_DIRECTORY) when there is one.
std::string user_path(const std::string& path);

}  // namespace pipewright::examples
