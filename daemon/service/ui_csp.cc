#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/service/ui_page.h"

namespace deltatune::daemon {
namespace {

// 'sha256-<base64>' of what lies between the first <tag> and </tag>; empty without one.
std::string element_hash(std::string_view html, const std::string& tag) {
    const std::string open = "<" + tag + ">", close = "</" + tag + ">";
    const size_t begin = html.find(open);
    if (begin == std::string_view::npos) return "";
    const size_t from = begin + open.size();
    const size_t end = html.find(close, from);
    if (end == std::string_view::npos) return "";
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    EVP_Digest(html.data() + from, end - from, digest, &size, EVP_sha256(), nullptr);
    return absl::StrCat(
        "'sha256-",
        absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(digest), size)), "'");
}

}  // namespace

std::string ui_content_security_policy(std::string_view html) {
    return absl::StrCat("default-src 'none'; script-src ", element_hash(html, "script"),
                        "; style-src ", element_hash(html, "style"),
                        "; connect-src 'self'; img-src data:; base-uri 'none'; "
                        "form-action 'none'; frame-ancestors 'none'");
}

}  // namespace deltatune::daemon
