#include "pipeline/schedule/io.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <stdexcept>
#include <vector>

#include "pipeline/schedule/validate.h"

namespace pipewright::pipeline {
namespace {

constexpr std::string_view kHeader = "worker,index,stage,kind,microbatch";
constexpr std::string_view kMetaPrefix = "# schedule";

[[noreturn]] void fail_at(int line, const std::string& what) {
  throw std::invalid_argument("from_csv: line " + std::to_string(line) + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(trim(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

int parse_int(std::string_view field, const char* what, int line) {
  int value = 0;
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (field.empty() || ec != std::errc() || ptr != field.data() + field.size()) {
    fail_at(line, std::string(what) + " '" + std::string(field) + "' is not an integer");
  }
  if (value < 0) fail_at(line, std::string(what) + " " + std::to_string(value) + " is negative");
  return value;
}

ActionKind parse_kind(std::string_view field, int line) {
  for (ActionKind k : {ActionKind::kForward, ActionKind::kRecompute, ActionKind::kBackward,
                       ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
    if (field.size() == 1 && field[0] == action_letter(k)) return k;
  }
  fail_at(line, "kind '" + std::string(field) + "' is not one of F, R, B, I, W");
}

struct Meta {
  std::string name = "custom";
  std::optional<int> workers, stages, microbatches;
  std::optional<std::vector<int>> stage_worker;
};

Meta parse_meta(std::string_view line_text, int line) {
  Meta meta;
  std::string_view rest = trim(line_text.substr(kMetaPrefix.size()));
  for (std::string_view item : split(rest, ' ')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) fail_at(line, "metadata item '" + std::string(item) + "' is not key=value");
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "name") {
      meta.name = std::string(value);
    } else if (key == "workers") {
      meta.workers = parse_int(value, "workers", line);
    } else if (key == "stages") {
      meta.stages = parse_int(value, "stages", line);
    } else if (key == "microbatches") {
      meta.microbatches = parse_int(value, "microbatches", line);
    } else if (key == "stage_worker") {
      std::vector<int> sw;
      for (std::string_view v : split(value, ',')) sw.push_back(parse_int(v, "stage_worker entry", line));
      meta.stage_worker = sw;
    } else {
      fail_at(line, "unknown metadata key '" + std::string(key) +
                        "' (valid: name, workers, stages, microbatches, stage_worker)");
    }
  }
  return meta;
}

struct Row {
  int line;
  int worker;
  int index;
  Action action;
};

}  // namespace

std::string to_csv(const Schedule& s) {
  std::string out = std::string(kMetaPrefix) + " name=" + s.name + " workers=" + std::to_string(s.num_workers) +
                    " stages=" + std::to_string(s.num_stages) +
                    " microbatches=" + std::to_string(s.num_microbatches) + " stage_worker=";
  for (size_t i = 0; i < s.stage_worker.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(s.stage_worker[i]);
  }
  out += "\n";
  out += kHeader;
  out += "\n";
  for (size_t w = 0; w < s.actions.size(); ++w) {
    for (size_t i = 0; i < s.actions[w].size(); ++i) {
      const Action& a = s.actions[w][i];
      out += std::to_string(w) + "," + std::to_string(i) + "," + std::to_string(a.stage) + "," +
             action_letter(a.kind) + "," + std::to_string(a.microbatch) + "\n";
    }
  }
  return out;
}

Schedule from_csv(std::string_view text) {
  Meta meta;
  bool seen_header = false;
  std::vector<Row> rows;
  int line = 0;
  for (std::string_view raw : split(text, '\n')) {
    ++line;
    const std::string_view t = trim(raw);
    if (t.empty()) continue;
    if (!seen_header) {
      if (rows.empty() && line == 1 && t.substr(0, kMetaPrefix.size()) == kMetaPrefix) {
        meta = parse_meta(t, line);
        continue;
      }
      if (t != kHeader) {
        fail_at(line, "expected the header '" + std::string(kHeader) + "', got '" + std::string(t) + "'");
      }
      seen_header = true;
      continue;
    }
    const auto fields = split(t, ',');
    if (fields.size() != 5) {
      fail_at(line, "expected 5 fields (" + std::string(kHeader) + "), got " + std::to_string(fields.size()) +
                        ": '" + std::string(t) + "'");
    }
    Row r{line, parse_int(fields[0], "worker", line), parse_int(fields[1], "index", line), Action{}};
    r.action.stage = parse_int(fields[2], "stage", line);
    r.action.kind = parse_kind(fields[3], line);
    r.action.microbatch = parse_int(fields[4], "microbatch", line);
    rows.push_back(r);
  }
  if (!seen_header) {
    throw std::invalid_argument("from_csv: no header line '" + std::string(kHeader) + "'");
  }

  Schedule s;
  s.name = meta.name;
  int max_worker = -1, max_stage = -1, max_mb = -1;
  for (const Row& r : rows) {
    max_worker = std::max(max_worker, r.worker);
    max_stage = std::max(max_stage, r.action.stage);
    max_mb = std::max(max_mb, r.action.microbatch);
  }
  s.num_workers = meta.workers.value_or(max_worker + 1);
  s.num_stages = meta.stages.value_or(max_stage + 1);
  s.num_microbatches = meta.microbatches.value_or(max_mb + 1);
  // Every (stage, micro-batch) cell needs its own F row, so counts beyond the rows are wrong,
  // and refusing them here keeps a corrupt count (microbatch 155555555, found by
  // //fuzz:schedule_csv_fuzzer) from sizing validate()'s tables in gigabytes.
  const auto num_rows = static_cast<int64_t>(rows.size());
  if (static_cast<int64_t>(s.num_workers) > num_rows ||
      static_cast<int64_t>(s.num_stages) * s.num_microbatches > num_rows) {
    throw std::invalid_argument(
        "from_csv: workers=" + std::to_string(s.num_workers) + ", stages=" +
        std::to_string(s.num_stages) + ", microbatches=" + std::to_string(s.num_microbatches) +
        " need at least " + std::to_string(std::max<int64_t>(
                                s.num_workers, int64_t{s.num_stages} * s.num_microbatches)) +
        " action rows (one F per stage and micro-batch), the file has " +
        std::to_string(num_rows));
  }
  if (max_worker >= s.num_workers) {
    throw std::invalid_argument("from_csv: a row names worker " + std::to_string(max_worker) +
                                " but the metadata says workers=" + std::to_string(s.num_workers));
  }
  if (meta.stage_worker) {
    s.stage_worker = *meta.stage_worker;
  } else {  // each stage belongs to the worker of its first row (-1: no row; validate says so)
    s.stage_worker.assign(std::max(s.num_stages, 0), -1);
    for (const Row& r : rows) {
      if (r.action.stage < s.num_stages && s.stage_worker[r.action.stage] < 0) {
        s.stage_worker[r.action.stage] = r.worker;
      }
    }
  }

  // Place rows by (worker, index); each index once, no gaps.
  std::vector<std::map<int, const Row*>> by_worker(std::max(s.num_workers, 0));
  for (const Row& r : rows) {
    auto [it, inserted] = by_worker[r.worker].emplace(r.index, &r);
    if (!inserted) {
      fail_at(r.line, "worker " + std::to_string(r.worker) + " has index " + std::to_string(r.index) +
                          " twice (first on line " + std::to_string(it->second->line) + ")");
    }
  }
  s.actions.resize(by_worker.size());
  for (size_t w = 0; w < by_worker.size(); ++w) {
    int expected = 0;
    for (const auto& [index, row] : by_worker[w]) {
      if (index != expected) {
        throw std::invalid_argument("from_csv: worker " + std::to_string(w) + " has no action with index " +
                                    std::to_string(expected) + " (next is " + std::to_string(index) +
                                    " on line " + std::to_string(row->line) + ")");
      }
      s.actions[w].push_back(row->action);
      ++expected;
    }
  }
  validate(s);
  return s;
}

namespace {

[[noreturn]] void torch_fail(size_t row, size_t column, std::string_view cell,
                             const std::string& what) {
  throw std::invalid_argument("from_torch_csv: row " + std::to_string(row) + ", column " +
                              std::to_string(column) + " ('" + std::string(cell) + "'): " + what);
}

/// Reads the leading decimal digits of `s` (at least one) and removes them. -1 when there are
/// none or the value does not fit an int.
int take_number(std::string_view& s) {
  size_t n = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') ++n;
  int value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + n, value);
  if (n == 0 || ec != std::errc() || ptr != s.data() + n) return -1;
  s.remove_prefix(n);
  return value;
}

/// One torch action: appends the compute actions it stands for (none for communication).
void parse_torch_action(std::string_view cell, size_t row, size_t column,
                        std::vector<Action>& out) {
  std::string_view text = cell;
  const int stage = take_number(text);
  if (stage < 0) torch_fail(row, column, cell, "an action starts with its stage index");
  static constexpr std::string_view kComms[] = {"SEND_F", "RECV_F", "SEND_B", "RECV_B",
                                                "UNSHARD", "RESHARD", "REDUCE_GRAD"};
  for (std::string_view comm : kComms) {
    if (text.substr(0, comm.size()) == comm) return;  // the transport does these
  }
  ActionKind kind;
  switch (text.empty() ? '\0' : text.front()) {
    case 'F': kind = ActionKind::kForward; break;
    case 'I': kind = ActionKind::kBackwardInput; break;
    case 'W': kind = ActionKind::kBackwardWeight; break;
    case 'B': kind = ActionKind::kBackward; break;
    default:
      torch_fail(row, column, cell, "the type after the stage must be F, I, W, B or a "
                                    "communication action");
  }
  text.remove_prefix(1);
  const int microbatch = take_number(text);
  if (microbatch < 0 || !text.empty()) {
    torch_fail(row, column, cell, "a compute action ends with its micro-batch index");
  }
  out.push_back({stage, kind, microbatch});
}

}  // namespace

std::string to_torch_csv(const Schedule& schedule) {
  std::string out;
  for (const auto& list : schedule.actions) {
    for (size_t k = 0; k < list.size(); ++k) {
      const Action& a = list[k];
      if (a.kind == ActionKind::kRecompute) {
        throw std::invalid_argument("to_torch_csv: " + a.str() +
                                    ": torch's format has no recompute; write the schedule "
                                    "before with_recompute");
      }
      if (k > 0) out += ',';
      out += std::to_string(a.stage) + action_letter(a.kind) + std::to_string(a.microbatch);
    }
    out += '\n';
  }
  return out;
}

Schedule from_torch_csv(std::string_view text, const std::string& name) {
  std::vector<std::string_view> lines = split(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
  Schedule s;
  s.name = name;
  s.num_workers = static_cast<int>(lines.size());
  s.actions.resize(lines.size());
  std::map<int, int> stage_row;
  int max_stage = -1, max_microbatch = -1;
  for (size_t row = 0; row < lines.size(); ++row) {
    const std::vector<std::string_view> cells = split(lines[row], ',');
    for (size_t column = 0; column < cells.size(); ++column) {
      std::string_view cell = cells[column];
      if (cell.empty()) continue;  // an idle slot
      std::vector<Action> actions;
      if (cell.front() == '(') {  // "(0F3;3B1)OVERLAP_F_B": the pair, in order
        const size_t close = cell.find(')');
        if (close == std::string_view::npos || cell.substr(close + 1) != "OVERLAP_F_B") {
          torch_fail(row, column, cell, "an overlapped pair is written (a;b)OVERLAP_F_B");
        }
        for (std::string_view sub : split(cell.substr(1, close - 1), ';')) {
          parse_torch_action(sub, row, column, actions);
        }
      } else {
        parse_torch_action(cell, row, column, actions);
      }
      for (const Action& a : actions) {
        const auto [it, inserted] = stage_row.emplace(a.stage, static_cast<int>(row));
        if (!inserted && it->second != static_cast<int>(row)) {
          torch_fail(row, column, cell, "stage " + std::to_string(a.stage) +
                                            " is also on row " + std::to_string(it->second) +
                                            " (a stage belongs to one rank)");
        }
        max_stage = std::max(max_stage, a.stage);
        max_microbatch = std::max(max_microbatch, a.microbatch);
        s.actions[row].push_back(a);
      }
    }
  }
  s.num_stages = max_stage + 1;
  s.num_microbatches = max_microbatch + 1;
  // As in from_csv: every (stage, micro-batch) needs its own F, so counts beyond the actions
  // are wrong, and refusing them keeps a huge index from sizing the tables below.
  int64_t num_actions = 0;
  for (const auto& list : s.actions) num_actions += static_cast<int64_t>(list.size());
  const int64_t cells = int64_t{s.num_stages} * s.num_microbatches;
  if (cells > num_actions) {
    throw std::invalid_argument("from_torch_csv: stages=" + std::to_string(s.num_stages) +
                                ", microbatches=" + std::to_string(s.num_microbatches) +
                                " need at least " + std::to_string(cells) +
                                " actions (one F per stage and micro-batch), the file has " +
                                std::to_string(num_actions));
  }
  s.stage_worker.assign(static_cast<size_t>(s.num_stages), -1);
  for (int stage = 0; stage < s.num_stages; ++stage) {
    auto it = stage_row.find(stage);
    if (it == stage_row.end()) {
      throw std::invalid_argument("from_torch_csv: stage " + std::to_string(stage) +
                                  " appears on no row (stages are 0.." +
                                  std::to_string(max_stage) + ")");
    }
    s.stage_worker[static_cast<size_t>(stage)] = it->second;
  }
  validate(s);
  return s;
}

Schedule from_any_csv(std::string_view text, const std::string& torch_name) {
  // Ours starts with its metadata and header lines; torch's rows are actions only. The
  // header's first fields are enough: a header mistyped after them gets from_csv's message.
  constexpr std::string_view kOurs = "worker,index,";
  return text.find(kOurs) != std::string_view::npos ? from_csv(text) : from_torch_csv(text, torch_name);
}

}  // namespace pipewright::pipeline
