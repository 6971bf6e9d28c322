// Data files are read at submission: formats deltatune does not read are refused by name, and the
// first line must be of the spec's format (daemon/config/data_check.h).
#include <catch2/catch.hpp>

#include <fstream>

#include "absl/strings/str_replace.h"
#include "daemon/config/data_check.h"
#include "tests/common/test_util.h"

namespace deltatune::daemon {
namespace {

std::string check(const std::string& bytes, v1::DataFormat format = v1::DATA_FORMAT_UNSPECIFIED,
                  v1::BadLinePolicy bad_lines = v1::BAD_LINE_POLICY_FAIL) {
    testing::TempDir dir;
    const std::string path = dir.file("d.jsonl");
    std::ofstream(path, std::ios::binary) << bytes;
    v1::DataSpec data;
    data.set_format(format);
    data.set_bad_lines(bad_lines);
    const absl::Status s = check_data_file("data.train_files[0]", path, data).status();
    if (s.ok()) return "ok";
    return absl::StrReplaceAll(s.message(), {{path, "PATH"}});
}

TEST_CASE("data files in formats deltatune does not read are refused by name", "[daemon]") {
    CHECK(check(std::string("PAR1\x15\x04", 6)) ==
          "INVALID_CONFIG: data.train_files[0] (PATH) is a Parquet file; deltatune reads JSON "
          "Lines (one JSON object per line). Convert it on your side, e.g. `python3 "
          "scripts/tools/hf_to_jsonl.py PATH OUT.jsonl` (needs the `datasets` package)");
    CHECK_THAT(check("\x1f\x8b\x08"), Catch::Contains("is gzip-compressed; deltatune reads JSON"));
    CHECK_THAT(check("ARROW1\0\0"), Catch::Contains("is an Arrow file"));
    CHECK_THAT(check("PK\x03\x04"), Catch::Contains("is a zip archive"));
}

TEST_CASE("the first line of a data file must be of the spec's format", "[daemon]") {
    CHECK(check("\n  \n{\"messages\": []}\n") == "ok");  // blank lines are skipped
    CHECK(check("{\"input_ids\": [1]}\n", v1::DATA_FORMAT_TOKENIZED) == "ok");
    CHECK(check("{\"text\": \"hi\"}\n", v1::DATA_FORMAT_CHAT) == "ok");
    CHECK(check("{\"input\": \"hi\", \"id\": 1}\n") ==
          "INVALID_CONFIG: data.train_files[0] (PATH):1: the first line has \"input\", \"id\"; "
          "expected \"messages\", \"conversations\", \"prompt\" or \"text\" (chat) or "
          "\"input_ids\" (tokenized)");
    CHECK(check("{\"input_ids\": [1]}\n", v1::DATA_FORMAT_CHAT) ==
          "INVALID_CONFIG: data.train_files[0] (PATH):1: the first line has \"input_ids\"; "
          "expected \"messages\", \"conversations\", \"prompt\" or \"text\" (format: chat)");
    CHECK_THAT(check("{\"messages\": [}\n"),
               Catch::StartsWith("INVALID_CONFIG: data.train_files[0] (PATH):1: not valid JSON: "
                                 "parse error at line 1, column 15"));
    CHECK(check("{\"messages\": [}\n", v1::DATA_FORMAT_CHAT, v1::BAD_LINE_POLICY_SKIP) == "ok");
    CHECK(check("") == "INVALID_CONFIG: data.train_files[0] (PATH) holds no JSON line");
}

DataKind kind_of(const std::string& line, v1::DataFormat format = v1::DATA_FORMAT_UNSPECIFIED) {
    testing::TempDir dir;
    const std::string path = dir.file("d.jsonl");
    std::ofstream(path, std::ios::binary) << line;
    v1::DataSpec data;
    data.set_format(format);
    data.set_bad_lines(v1::BAD_LINE_POLICY_SKIP);
    absl::StatusOr<DataKind> kind = check_data_file("f", path, data);
    REQUIRE(kind.ok());
    return *kind;
}

TEST_CASE("the first line says what a file holds; conversations are truncated", "[daemon]") {
    CHECK(kind_of("{\"messages\": []}\n") == DataKind::kConversation);
    CHECK(kind_of("{\"conversations\": []}\n") == DataKind::kConversation);
    CHECK(kind_of("{\"prompt\": \"a\", \"completion\": \"b\"}\n") == DataKind::kConversation);
    CHECK(kind_of("{\"text\": \"a\"}\n") == DataKind::kText);
    CHECK(kind_of("{\"input_ids\": [1]}\n") == DataKind::kTokenized);
    CHECK(kind_of("not json\n", v1::DATA_FORMAT_CHAT) == DataKind::kConversation);
    CHECK(kind_of("not json\n", v1::DATA_FORMAT_TOKENIZED) == DataKind::kTokenized);
    CHECK(default_overlong({DataKind::kText, DataKind::kTokenized}) == v1::OVERLONG_POLICY_SPLIT);
    CHECK(default_overlong({DataKind::kText, DataKind::kConversation}) ==
          v1::OVERLONG_POLICY_TRUNCATE);
}

TEST_CASE("submission reads a bounded prefix of a data file", "[daemon]") {
    // A huge run of blank lines once held a CreateJob handler for 13.5 s per GiB: the check now
    // stops after the longest first line allowed plus kBlankPrefixBytes of blank lines.
    testing::TempDir dir;
    const std::string path = dir.file("d.jsonl");
    v1::DataSpec data;
    data.set_max_document_bytes(1 << 20);
    const std::string bad_line = "{\"input\": 1}\n";
    const size_t within = (size_t{1} << 20) + kBlankPrefixBytes / 2;
    std::ofstream(path, std::ios::binary) << std::string(within, '\n') << bad_line;
    CHECK_THAT(std::string(check_data_file("f", path, data).status().message()),
               Catch::Contains("the first line has \"input\""));
    const size_t beyond = (size_t{1} << 20) + kBlankPrefixBytes + (size_t{2} << 20);
    std::ofstream(path, std::ios::binary) << std::string(beyond, '\n') << bad_line;
    CHECK(check_data_file("f", path, data).ok());
}

}  // namespace
}  // namespace deltatune::daemon
