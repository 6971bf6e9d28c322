#include "daemon/service/reflection_v1.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

namespace deltatune::daemon {

namespace {

namespace pb = google::protobuf;
namespace rv1 = grpc::reflection::v1;

constexpr int kNotFound = 5;  // grpc::StatusCode::NOT_FOUND, as v1alpha reports it

// `file` and every file it imports, each once, the file first (what clients expect: they build
// their pool from the whole closure).
void add_file_closure(const pb::FileDescriptor* file, std::set<std::string>* seen,
                      rv1::FileDescriptorResponse* out) {
    if (!seen->insert(file->name()).second) return;
    pb::FileDescriptorProto proto;
    file->CopyTo(&proto);
    out->add_file_descriptor_proto(proto.SerializeAsString());
    for (int i = 0; i < file->dependency_count(); ++i) {
        add_file_closure(file->dependency(i), seen, out);
    }
}

void not_found(rv1::ServerReflectionResponse* r, const std::string& what) {
    r->mutable_error_response()->set_error_code(kNotFound);
    r->mutable_error_response()->set_error_message(what + " not found");
}

void answer_file(const pb::FileDescriptor* file, const std::string& what,
                 rv1::ServerReflectionResponse* r) {
    if (file == nullptr) return not_found(r, what);
    std::set<std::string> seen;
    add_file_closure(file, &seen, r->mutable_file_descriptor_response());
}

}  // namespace

rv1::ServerReflectionResponse ReflectionV1Service::answer(
    const rv1::ServerReflectionRequest& req) const {
    const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
    rv1::ServerReflectionResponse r;
    r.set_valid_host(req.host());
    *r.mutable_original_request() = req;
    switch (req.message_request_case()) {
        case rv1::ServerReflectionRequest::kListServices:
            for (const std::string& s : services_) {
                r.mutable_list_services_response()->add_service()->set_name(s);
            }
            break;
        case rv1::ServerReflectionRequest::kFileByFilename:
            answer_file(pool->FindFileByName(req.file_by_filename()),
                        "file " + req.file_by_filename(), &r);
            break;
        case rv1::ServerReflectionRequest::kFileContainingSymbol:
            answer_file(pool->FindFileContainingSymbol(req.file_containing_symbol()),
                        "symbol " + req.file_containing_symbol(), &r);
            break;
        case rv1::ServerReflectionRequest::kFileContainingExtension: {
            const auto& e = req.file_containing_extension();
            const pb::Descriptor* type = pool->FindMessageTypeByName(e.containing_type());
            const pb::FieldDescriptor* ext =
                type ? pool->FindExtensionByNumber(type, e.extension_number()) : nullptr;
            answer_file(
                ext ? ext->file() : nullptr,
                "extension " + std::to_string(e.extension_number()) + " of " + e.containing_type(),
                &r);
            break;
        }
        case rv1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
            const pb::Descriptor* type =
                pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
            if (type == nullptr) {
                not_found(&r, "type " + req.all_extension_numbers_of_type());
                break;
            }
            std::vector<const pb::FieldDescriptor*> exts;
            pool->FindAllExtensions(type, &exts);
            auto* numbers = r.mutable_all_extension_numbers_response();
            numbers->set_base_type_name(type->full_name());
            for (const pb::FieldDescriptor* f : exts) numbers->add_extension_number(f->number());
            break;
        }
        default:
            r.mutable_error_response()->set_error_code(3);  // INVALID_ARGUMENT
            r.mutable_error_response()->set_error_message("no request in the message");
    }
    return r;
}

grpc::Status ReflectionV1Service::ServerReflectionInfo(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<rv1::ServerReflectionResponse, rv1::ServerReflectionRequest>* stream) {
    rv1::ServerReflectionRequest req;
    while (stream->Read(&req)) {
        if (!stream->Write(answer(req))) break;
    }
    return grpc::Status::OK;
}

}  // namespace deltatune::daemon
