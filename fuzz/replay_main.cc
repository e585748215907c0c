// main() of a fuzz target built without libFuzzer (g++, the normal build): runs every file
// named on the command line, or found in a directory named there, through
// LLVMFuzzerTestOneInput once. Arguments starting with '-' (libFuzzer flags) are ignored.
// Exits non-zero when no input was found, so an empty corpus never reads as a pass.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::printf("replaying %s (%zu bytes)\n", path.c_str(), bytes.size());
  std::fflush(stdout);
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') continue;
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      std::vector<fs::path> files;
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (!fs::is_directory(entry.path())) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const fs::path& f : files) run_file(f), ++count;
    } else if (fs::exists(arg, ec)) {
      run_file(arg), ++count;
    }
  }
  std::printf("%d inputs replayed, none crashed\n", count);
  return count > 0 ? 0 : 1;
}
