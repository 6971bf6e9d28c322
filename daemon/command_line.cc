// CLI11 set up the one way every deltatune program reads its command line, and its errors worded
// as the rest of the project words them.
#include "daemon/command_line.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace deltatune::daemon {
namespace {

// The first argument nothing declared took: "unknown flag --colour" or "unexpected argument 'x'";
// "" when there is none.
std::string first_extra(const CLI::App& app) {
    const std::vector<std::string> extra = app.remaining();
    for (const std::string& a : extra) {
        if (a.size() > 1 && a[0] == '-') return "unknown flag " + a.substr(0, a.find('='));
    }
    return extra.empty() ? "" : absl::StrCat("unexpected argument '", extra.front(), "'");
}

// The one line for a parse error: CLI11's own text, but for those a user meets most (a flag not
// known, missing, or given without its value), which it words around its internals. An unknown
// flag is named first: a misspelt required flag is reported as itself, not as missing.
std::string message_of(const CLI::ParseError& e, const CLI::App& app) {
    const bool required = dynamic_cast<const CLI::RequiredError*>(&e) != nullptr;
    if (required || dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
        if (std::string extra = first_extra(app); !extra.empty()) return extra;
    }
    if (required) {
        for (const CLI::Option* o : app.get_options()) {
            if (!o->get_required() || o->count() > 0) continue;
            return o->nonpositional() ? absl::StrCat("missing required flag ", o->get_name())
                                      : absl::StrCat("expected one ", o->get_name());
        }
    }
    const std::string what = e.what();  // "--lr: 1 required X missing"
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr &&
        absl::EndsWith(what, " missing") && what.find(':') != std::string::npos) {
        return absl::StrCat("flag ", what.substr(0, what.find(':')), " needs a value");
    }
    return what;
}

constexpr size_t kHelpWidth = 100;
constexpr size_t kFlagColumn = 36;  // the flag and its value; the description after

// `text` broken at spaces into lines of at most `width` (a longer word stands alone); the line
// breaks it has are kept.
std::string wrap(const std::string& text, size_t width) {
    std::string out;
    for (const absl::string_view line : absl::StrSplit(text, '\n')) {
        if (!out.empty()) out += '\n';
        size_t used = 0;
        for (const absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
            if (used > 0 && used + 1 + word.size() > width) {
                out += '\n';
                used = 0;
            } else if (used > 0) {
                out += ' ';
                ++used;
            }
            absl::StrAppend(&out, word);
            used += word.size();
        }
    }
    return out;
}

// --help as a man page begins: the usage line, then what the command does, then its flags, their
// descriptions wrapped to the page.
class UsageFirst : public CLI::Formatter {
  public:
    std::string make_option_desc(const CLI::Option* option) const override {
        return wrap(option->get_description(), kHelpWidth - kFlagColumn);
    }

    std::string make_help(const CLI::App* app, std::string name,
                          CLI::AppFormatMode mode) const override {
        if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
        std::string out = make_usage(app, std::move(name)) + make_description(app) +
                          make_positionals(app) + make_groups(app, mode) +
                          make_subcommands(app, mode);
        const std::string footer = make_footer(app);
        if (!footer.empty()) out += "\n" + footer;
        // One blank line between sections (CLI11 ends a group with one and starts the next with
        // another).
        for (size_t at; (at = out.find("\n\n\n")) != std::string::npos;) out.erase(at, 1);
        return out;
    }
};

bool asks_for_help(const std::vector<std::string>& args) {
    for (const std::string& a : args) {
        if (a == "--") return false;  // what follows is a value, whatever it looks like
        if (a == "--help" || a == "-h") return true;
    }
    return false;
}

}  // namespace

void configure_command_line(CLI::App& app) {
    app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.option_defaults()->always_capture_default();
    auto formatter = std::make_shared<UsageFirst>();
    formatter->label("Usage", "usage");
    formatter->column_width(kFlagColumn);
    app.formatter(formatter);
}

const CLI::Validator& non_negative_integer() {
    static const CLI::Validator v(
        [](const std::string& s) {
            if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos) {
                return std::string();
            }
            return absl::StrCat("'", s, "' is not a non-negative integer");
        },
        "");
    return v;
}

const CLI::Validator& number() {
    static const CLI::Validator v(
        [](const std::string& s) {
            char* end = nullptr;
            errno = 0;
            (void)std::strtod(s.c_str(), &end);
            if (!s.empty() && *end == '\0' && errno == 0) return std::string();
            return absl::StrCat("'", s, "' is not a number");
        },
        "");
    return v;
}

CLI::Option* one_of(CLI::Option* option, std::vector<std::string> choices) {
    option->type_name(absl::StrJoin(choices, "|"));
    return option->check(CLI::Validator(
        [choices = std::move(choices)](const std::string& s) {
            if (std::find(choices.begin(), choices.end(), s) != choices.end()) return std::string();
            std::string expected = choices.back();
            if (choices.size() > 1) {
                const std::vector<std::string> head(choices.begin(), choices.end() - 1);
                expected = absl::StrCat(absl::StrJoin(head, ", "), " or ", expected);
            }
            return absl::StrCat("expected ", expected, ", got '", s, "'");
        },
        ""));
}

CLI::Option* repeated(CLI::Option* option) {
    return option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->allow_extra_args(false)
        ->default_str("");
}

absl::Status parse_command_line(CLI::App& app, std::vector<std::string> args, bool* help) {
    *help = asks_for_help(args);
    if (*help) return absl::OkStatus();
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    try {
        app.parse(args);
    } catch (const CLI::CallForHelp&) {
        *help = true;
    } catch (const CLI::ParseError& e) {
        return absl::InvalidArgumentError(message_of(e, app));
    }
    return absl::OkStatus();
}

std::optional<int> parse_or_exit_status(CLI::App& app, std::vector<std::string> args) {
    bool help = false;
    const absl::Status s = parse_command_line(app, std::move(args), &help);
    if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", app.get_name().c_str(), std::string(s.message()).c_str());
        return kExitBadCommandLine;
    }
    if (!help) return std::nullopt;
    std::fputs(app.help().c_str(), stdout);  // asked for: stdout, success
    return 0;
}

}  // namespace deltatune::daemon
