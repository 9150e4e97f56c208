// The gRPC adapter of nearprep.v1.Preprocessor (callback API). Each handler
// parses the raw request, authorizes the caller from what the transport
// established (server/authz), forwards to ServiceCore (service_core.h: the
// listing, ServerInfo, admission, the counters; no gRPC headers) and writes
// the answer back.
//
// Every method is registered "raw": StreamBatches so that batches can be
// written as grpc::ByteBuffers that reference the pipeline's batch memory
// (see batch_serializer.h), and all of them so that requests are parsed
// here: malformed bytes are INVALID_ARGUMENT naming the message type (gRPC's
// own parse failure would answer with a code and no message). One ServerWriteReactor per stream, in the shape of gRPC's
// route_guide callback server: the constructor asks the stream for its first
// result; each result is written (StartWrite) or ends the call (Finish); each
// completed write (OnWriteDone) asks for the next. No thread per stream, and
// the next batch is taken only when the previous write completed, so a slow
// client slows its stream's prefetch window down (backpressure).
//
// Thread-safety: all methods are called concurrently by gRPC; the class is
// thread-safe. It must outlive the grpc::Server it is registered with.
#ifndef NEARPREP_SERVER_SERVICE_PREPROCESSOR_SERVICE_H_
#define NEARPREP_SERVER_SERVICE_PREPROCESSOR_SERVICE_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "nearprep/v1/nearprep.grpc.pb.h"
#include "server/authz/authorizer.h"
#include "server/service/service_core.h"

namespace nearprep {

class PreprocessorService final
    : public v1::Preprocessor::WithRawCallbackMethod_ListDatasets<
          v1::Preprocessor::WithRawCallbackMethod_StreamBatches<
              v1::Preprocessor::WithRawCallbackMethod_GetServerInfo<
                  v1::Preprocessor::CallbackService>>> {
 public:
  // `core` and `authorizer` must outlive the service. `authorizer` checks
  // every ListDatasets, StreamBatches and GetServerInfo call (server/authz;
  // nullptr: none is checked).
  explicit PreprocessorService(ServiceCore* core,
                               authz::Authorizer* authorizer = nullptr);
  ~PreprocessorService() override;

  grpc::ServerUnaryReactor* ListDatasets(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

  // Metadata key and per-process random value with which the server's own
  // in-process GetServerInfo (NearprepServer::CheckServing, the watchdog)
  // skips authorization; it never leaves the process.
  static constexpr const char* kInternalKeyHeader = "nearprep-internal-key";
  const std::string& internal_key() const { return internal_key_; }

 private:
  class BatchWriter;

  ServiceCore* const core_;
  authz::Authorizer* const authorizer_;
  std::string internal_key_;
};

}  // namespace nearprep

#endif  // NEARPREP_SERVER_SERVICE_PREPROCESSOR_SERVICE_H_
