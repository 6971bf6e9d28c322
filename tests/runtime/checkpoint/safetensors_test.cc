// safetensors round trip and every corrupt-file case with its clear error.
#include <catch2/catch.hpp>

#include <fstream>

#include "runtime/base/file_util.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/common/test_util.h"

namespace deltatune {
namespace {

using testing::TempDir;

std::string message(const absl::Status& s) {
    return std::string(s.message());
}

void write_raw(const std::string& path, const std::string& header, const std::string& data) {
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i)
        prefix[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    REQUIRE(write_file_atomic(path, prefix + header + data).ok());
}

TEST_CASE("safetensors round trip keeps names, shapes, dtypes, values and metadata",
          "[checkpoint]") {
    TempDir tmp;
    Tensor f32 = Tensor::cpu_from({2, 3}, std::vector<float>{1.5f, -2, 3, 4, 5, 6.25f});
    auto bf16 = f32.to_dtype(DType::kBF16);
    auto f16 = f32.to_dtype(DType::kF16);
    Tensor i64 = Tensor::cpu({3}, DType::kI64);
    i64.data<int64_t>()[2] = -7;
    Tensor i32 = Tensor::cpu({1, 1}, DType::kI32);
    i32.data<int32_t>()[0] = 42;
    Tensor empty = Tensor::cpu({0, 4});
    REQUIRE(bf16.ok());
    REQUIRE(f16.ok());
    const std::string path = tmp.file("t.safetensors");
    REQUIRE(write_safetensors(path,
                              {{"a.f32", f32},
                               {"b.bf16", *bf16},
                               {"c.f16", *f16},
                               {"d.i64", i64},
                               {"e.i32", i32},
                               {"f.empty", empty}},
                              {{"format", "pt"}})
                .ok());
    auto f = SafetensorsFile::open(path);
    REQUIRE(f.ok());
    CHECK(f->names().size() == 6);
    CHECK(f->metadata().at("format") == "pt");
    auto a = f->get("a.f32");
    REQUIRE(a.ok());
    CHECK(a->shape() == std::vector<int64_t>{2, 3});
    CHECK(std::vector<float>(a->data<float>(), a->data<float>() + 6) ==
          std::vector<float>{1.5f, -2, 3, 4, 5, 6.25f});
    auto b = f->get("b.bf16");
    REQUIRE(b.ok());
    CHECK(b->dtype() == DType::kBF16);
    CHECK(b->to_cpu_f32()->data<float>()[5] == 6.25f);
    CHECK(f->get("c.f16")->dtype() == DType::kF16);
    CHECK(f->get("d.i64")->data<int64_t>()[2] == -7);
    CHECK(f->get("e.i32")->data<int32_t>()[0] == 42);
    CHECK(f->get("f.empty")->numel() == 0);
    auto missing = f->get("nope");
    CHECK(missing.status().code() == absl::StatusCode::kNotFound);
    CHECK(message(missing.status()) == path + ": no tensor 'nope'");
}

TEST_CASE("duplicate names are refused on write", "[checkpoint]") {
    TempDir tmp;
    Tensor t = Tensor::cpu({1});
    auto s = write_safetensors(tmp.file("d.safetensors"), {{"x", t}, {"x", t}});
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("corrupt safetensors files give clear errors naming file and tensor", "[checkpoint]") {
    TempDir tmp;
    const std::string path = tmp.file("bad.safetensors");
    auto open_error = [&]() {
        auto f = SafetensorsFile::open(path);
        REQUIRE_FALSE(f.ok());
        return f.status();
    };

    SECTION("missing file") {
        auto s = SafetensorsFile::open(tmp.file("absent.safetensors")).status();
        CHECK(s.code() == absl::StatusCode::kNotFound);
    }
    SECTION("shorter than the length prefix") {
        REQUIRE(write_file_atomic(path, std::string("abc")).ok());
        CHECK(message(open_error()).find("shorter than the 8-byte header length") !=
              std::string::npos);
    }
    SECTION("header length beyond the file") {
        write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "");
        std::string text = *read_file(path);
        text.resize(text.size() - 10);
        REQUIRE(write_file_atomic(path, text).ok());
        const auto s = open_error();
        CHECK(s.code() == absl::StatusCode::kDataLoss);
        CHECK(message(s).find("exceeds the file size") != std::string::npos);
    }
    SECTION("truncated data region") {
        write_raw(path, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                  std::string(8, '\0'));
        const auto s = open_error();
        CHECK(s.code() == absl::StatusCode::kDataLoss);
        CHECK(message(s) ==
              path +
                  ": corrupt safetensors file: tensor 'w' data_offsets [0, 16) exceed the data "
                  "region of 8 bytes (file truncated?)");
    }
    SECTION("header is not JSON") {
        write_raw(path, "{not json", "");
        CHECK(message(open_error()).find("header is not valid JSON") != std::string::npos);
    }
    SECTION("unknown dtype names the tensor") {
        write_raw(path, R"({"q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})",
                  std::string(2, '\0'));
        const auto s = open_error();
        CHECK(s.code() == absl::StatusCode::kInvalidArgument);
        CHECK(message(s) ==
              path +
                  ": tensor 'q' has unsupported dtype 'F8_E4M3' (supported: BF16 F16 F32 I32 I64)");
    }
    SECTION("byte count that does not match the shape") {
        write_raw(path, R"({"m":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})",
                  std::string(4, '\0'));
        CHECK(message(open_error()).find("tensor 'm' holds 4 bytes but shape and BF16 need 6") !=
              std::string::npos);
    }
    SECTION("overlapping tensors") {
        write_raw(path,
                  R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  std::string(8, '\0'));
        CHECK(message(open_error()).find("tensors 'a' and 'b' overlap") != std::string::npos);
    }
    SECTION("missing data_offsets") {
        write_raw(path, R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'));
        CHECK(message(open_error()).find("tensor 'a' has no data_offsets pair") !=
              std::string::npos);
    }
}

}  // namespace
}  // namespace deltatune
