// daemon/command_line.h: how every deltatune program reads its flags, and how a bad one is told.
#include "daemon/command_line.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace deltatune::daemon {
namespace {

struct Flags {
    std::string model, device = "cpu", job;
    uint64_t steps = 3;
    int ranks = 0;
    double lr = 1e-3;
    bool watch = false;
    std::vector<std::string> labels;
};

// "deltatune demo": one flag of each kind the programs declare.
struct Demo {
    CLI::App app{"a command to test the parser with", "deltatune demo"};
    Flags f;
    Demo() {
        configure_command_line(app);
        app.add_option("JOB", f.job, "the job")->required();
        app.add_option("--model", f.model, "the model")->required()->type_name("DIR");
        one_of(app.add_option("--device", f.device, "where it runs"), {"cpu", "cuda"});
        app.add_option("--steps", f.steps, "steps")->check(non_negative_integer());
        app.add_option("--ranks", f.ranks, "ranks")->check(non_negative_integer());
        app.add_option("--lr", f.lr, "learning rate")->check(number());
        app.add_flag("--watch", f.watch, "follow it");
        repeated(app.add_option("--label", f.labels, "a label; repeated: all of them"));
    }
    // "" when the line parses, else its one-line error.
    std::string parse(const std::string& line) {
        bool help = false;
        const absl::Status s =
            parse_command_line(app, absl::StrSplit(line, ' ', absl::SkipEmpty()), &help);
        REQUIRE_FALSE(help);
        return s.ok() ? "" : std::string(s.message());
    }
};

TEST_CASE("a bad value is one line naming the flag and the value", "[cli]") {
    CHECK(Demo().parse("j --model m --lr fast") == "--lr: 'fast' is not a number");
    CHECK(Demo().parse("j --model m --lr=") == "flag --lr needs a value");
    CHECK(Demo().parse("j --model m --steps -1") == "--steps: '-1' is not a non-negative integer");
    CHECK(Demo().parse("j --model m --steps 1e3") ==
          "--steps: '1e3' is not a non-negative integer");
    CHECK(Demo().parse("j --model m --steps 2.5") ==
          "--steps: '2.5' is not a non-negative integer");
    CHECK(Demo().parse("j --model m --ranks=+4") == "--ranks: '+4' is not a non-negative integer");
    CHECK(Demo().parse("j --model m --device tpu") == "--device: expected cpu or cuda, got 'tpu'");
    CHECK_THAT(Demo().parse("j --model m --ranks 99999999999"),
               Catch::Contains("--ranks") && Catch::Contains("99999999999"));
    CHECK(Demo().parse("j --model m --steps") == "flag --steps needs a value");
}

TEST_CASE("unknown, missing and surplus arguments are named", "[cli]") {
    CHECK(Demo().parse("j --model m --colour blue") == "unknown flag --colour");
    CHECK(Demo().parse("j --model m --colour=blue") == "unknown flag --colour");
    CHECK(Demo().parse("j") == "missing required flag --model");
    CHECK(Demo().parse("--model m") == "expected one JOB");
    CHECK(Demo().parse("j k --model m") == "unexpected argument 'k'");
    // A misspelt required flag is reported as itself, not as the one missing.
    CHECK(Demo().parse("j --modle m") == "unknown flag --modle");
}

TEST_CASE("values parse as --name VALUE and --name=VALUE; the last one counts", "[cli]") {
    Demo d;
    CHECK(d.parse("--model=a j --steps 7 --lr -2e-5 --steps=9 --watch --model b --label x=1 "
                  "--label y=2") == "");
    CHECK(d.f.job == "j");
    CHECK(d.f.model == "b");
    CHECK(d.f.steps == 9);
    CHECK(d.f.lr == -2e-5);  // a negative number is a value, not a flag
    CHECK(d.f.watch);
    CHECK(d.f.labels == std::vector<std::string>{"x=1", "y=2"});
    CHECK(d.f.device == "cpu");  // defaults stay
    Demo after_dashes;
    CHECK(after_dashes.parse("--model m -- -j") == "");  // after --, a value even if it looks
    CHECK(after_dashes.f.job == "-j");                   // like a flag
}

TEST_CASE("--help wins over anything else on the line and is generated from the flags", "[cli]") {
    Demo d;
    bool help = false;
    CHECK(parse_command_line(d.app, {"--lr", "fast", "-h"}, &help).ok());
    CHECK(help);
    const std::string text = d.app.help();
    CHECK_THAT(text, Catch::StartsWith("usage: deltatune demo [OPTIONS] JOB\n"
                                       "a command to test the parser with\n"));
    CHECK_THAT(text, Catch::Contains("--device cpu|cuda=cpu"));
    CHECK_THAT(text, Catch::Contains("--model DIR REQUIRED"));
    CHECK_THAT(text, Catch::Contains("--label TEXT ..."));
    CHECK_THAT(text, !Catch::Contains("\n\n\n"));
    for (const absl::string_view line : absl::StrSplit(text, '\n')) CHECK(line.size() <= 100);
}

}  // namespace
}  // namespace deltatune::daemon
