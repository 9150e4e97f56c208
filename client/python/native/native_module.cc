// nearprep._native: the native receive path of the Python client.
//
// A Stream runs StreamBatches with the C++ client library (nearprep::Client,
// BatchReader::NextInto) and hands each batch to Python as (header bytes,
// Buffer): the header is the serialized nearprep.v1.Batch without tensor
// data (small), and the Buffer is a writable 1-D byte buffer (Python buffer
// protocol) over a page-aligned block of a ReceiveBufferPool into which the tensor
// bytes were copied once, straight from gRPC's receive slices. numpy wraps
// it without a copy (np.frombuffer); the block returns to the pool when the
// last array over it is gone. The GIL is released while a Stream waits for,
// receives and copies a batch.
//
// Resume, failover and retries stay in Python (nearprep.client): a Stream
// never reconnects by itself (reconnect_deadline 0); a broken stream ends
// with status() UNAVAILABLE and the Python client decides.
//
// Channel.stream(..., timeout=seconds) gives the call a deadline (grpcio's
// `timeout=`): a server that stops answering, even without closing the
// connection, ends the stream with status() DEADLINE_EXCEEDED once it
// passes (nearprep.fleet fails over on it). Channel(keepalive_time=,
// keepalive_timeout=) set the HTTP/2 keepalive that notices a silent
// connection while a stream is open (UNAVAILABLE).
//
// TLS is not offered here: the Python client uses its grpcio path for TLS
// channels.
//
// Thread-safety: Channel is thread-safe. A Stream's next() is called by one
// thread at a time; cancel() by any thread. Buffers and pools are
// thread-safe.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "receive_buffer_pool.h"
#include "nearprep/client.h"

namespace py = pybind11;

namespace nearprep {
namespace {

bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;  // public from Python 3.13
#else
  return _Py_IsFinalizing() != 0;
#endif
}

class PyBuffer {
 public:
  explicit PyBuffer(std::unique_ptr<ReceiveBufferPool::Block> block)
      : block_(std::move(block)) {}
  ReceiveBufferPool::Block& block() { return *block_; }

 private:
  std::unique_ptr<ReceiveBufferPool::Block> block_;
};

class PyStream {
 public:
  PyStream(std::unique_ptr<BatchReader> reader,
           std::shared_ptr<ReceiveBufferPool> pool)
      : reader_(std::move(reader)), pool_(std::move(pool)) {}

  // (header bytes, Buffer or None) for the next batch; None at the end of
  // the stream or on error (status() says which).
  //
  // The GIL is released by hand rather than with py::gil_scoped_release:
  // when the interpreter finalises while a (daemon) thread waits here,
  // taking the GIL back ends the thread with pthread_exit, whose unwinding
  // through gil_scoped_release's noexcept destructor is std::terminate
  // ("terminate called without an active exception", exit 134). So a thread
  // that finishes its receive after finalisation began never takes the GIL
  // back: it parks (the process is ending; the thread touches nothing
  // more). nearprep.client joins its readers before finalisation; this is
  // the guard for a thread it could not stop in time.
  py::object Next() {
    std::string header_bytes;
    std::unique_ptr<ReceiveBufferPool::Block> block;
    bool ok;
    PyThreadState* const saved = PyEval_SaveThread();
    try {
      v1::Batch header;
      ok = reader_->NextInto(&header, [&](size_t bytes) -> uint8_t* {
        block = pool_->Acquire(bytes);
        return block ? block->data() : nullptr;
      });
      if (ok) header.SerializeToString(&header_bytes);
    } catch (...) {
      ReacquireGil(saved);
      throw;
    }
    ReacquireGil(saved);
    if (!ok) return py::none();
    py::object buffer = py::none();
    if (block) buffer = py::cast(PyBuffer(std::move(block)));
    return py::make_tuple(py::bytes(header_bytes), buffer);
  }

  void Cancel() { reader_->Cancel(); }

  // PyEval_RestoreThread(saved), unless the interpreter is finalising: then
  // the thread parks for good instead (see Next). Not noexcept, so the
  // remaining race (finalisation beginning between the check and the
  // restore) unwinds this thread the way CPython intends.
  static void ReacquireGil(PyThreadState* saved) {
    while (Finalizing()) {
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    PyEval_RestoreThread(saved);
  }

  // (canonical code name, message); ("OK", "") while streaming or after a
  // clean end.
  py::tuple Status() const {
    const absl::Status st = reader_->status();
    return py::make_tuple(absl::StatusCodeToString(st.code()),
                          std::string(st.message()));
  }

 private:
  std::unique_ptr<BatchReader> reader_;
  std::shared_ptr<ReceiveBufferPool> pool_;
};

class PyChannel {
 public:
  PyChannel(const std::string& target, double keepalive_time_s,
            double keepalive_timeout_s, const std::string& token,
            int64_t max_receive_bytes)
      : client_([&] {
          ClientOptions o;
          o.target = target;
          o.max_receive_message_bytes = max_receive_bytes;  // -1: none
          o.bearer_token = token;  // "" = none
          o.reconnect_deadline = std::chrono::milliseconds(0);
          o.keepalive_time = std::chrono::milliseconds(
              static_cast<int64_t>(keepalive_time_s * 1000));
          o.keepalive_timeout = std::chrono::milliseconds(
              static_cast<int64_t>(keepalive_timeout_s * 1000));
          return o;
        }()) {}

  // timeout: seconds for the whole call, None for no deadline.
  PyStream Stream(const py::bytes& request, std::shared_ptr<ReceiveBufferPool> pool,
                  const py::object& timeout) {
    v1::StreamBatchesRequest req;
    if (!req.ParseFromString(std::string(request))) {
      throw py::value_error("request: not a serialized StreamBatchesRequest");
    }
    StreamOptions so;
    if (!timeout.is_none()) {
      const double seconds = timeout.cast<double>();
      if (!(seconds > 0)) {
        throw py::value_error("timeout: must be > 0 seconds or None");
      }
      // At least 1 ms: a zero StreamOptions::timeout means none.
      so.timeout = std::chrono::milliseconds(std::max<int64_t>(
          1, static_cast<int64_t>(std::ceil(seconds * 1000))));
    }
    return PyStream(client_.StreamBatches(req, so), std::move(pool));
  }

 private:
  Client client_;
};

}  // namespace
}  // namespace nearprep

PYBIND11_MODULE(_native, m) {
  using nearprep::ReceiveBufferPool;
  m.doc() = "nearprep's native receive path (see native_module.cc)";

  // gRPC allocates its receive buffers with malloc and frees them once a
  // message is consumed. With glibc's defaults the freed memory is returned
  // to the kernel (heap trimming, or munmap of large chunks) and faulted in
  // again for the next message: tens of page faults per received image.
  // Keeping up to `bytes` of freed heap instead is a process-wide setting,
  // so nearprep.transport applies it only when the native path is used.
  m.def("keep_freed_memory", &nearprep::KeepFreedMemory, py::arg("bytes"));

  py::class_<ReceiveBufferPool, std::shared_ptr<ReceiveBufferPool>>(m, "ReceiveBufferPool")
      .def(py::init([](size_t max_free, bool lock) {
             ReceiveBufferPool::Options o;
             o.max_free = max_free;
             o.lock = lock;
             return ReceiveBufferPool::Create(o);
           }),
           py::arg("max_free") = 4, py::arg("lock") = false)
      .def_property_readonly(
          "lock", [](const ReceiveBufferPool& p) { return p.options().lock; })
      .def("stats", [](const ReceiveBufferPool& p) {
        const ReceiveBufferPool::Stats s = p.stats();
        py::dict d;
        d["allocated"] = s.allocated;
        d["reused"] = s.reused;
        d["released"] = s.released;
        d["lock_failures"] = s.lock_failures;
        d["locked_bytes"] = s.locked_bytes;
        d["free_buffers"] = s.free_buffers;
        return d;
      });

  py::class_<nearprep::PyBuffer>(m, "Buffer", py::buffer_protocol())
      .def_buffer([](nearprep::PyBuffer& b) {
        return py::buffer_info(b.block().data(), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.block().size())},
                               {static_cast<py::ssize_t>(1)});
      })
      .def_property_readonly(
          "locked", [](nearprep::PyBuffer& b) { return b.block().locked(); })
      .def_property_readonly("address", [](nearprep::PyBuffer& b) {
        return reinterpret_cast<uintptr_t>(b.block().data());
      })
      .def("__len__", [](nearprep::PyBuffer& b) { return b.block().size(); });

  py::class_<nearprep::PyStream>(m, "Stream")
      .def("next", &nearprep::PyStream::Next)
      .def("cancel", &nearprep::PyStream::Cancel)
      .def("status", &nearprep::PyStream::Status);

  py::class_<nearprep::PyChannel>(m, "Channel")
      .def(py::init<const std::string&, double, double, const std::string&, int64_t>(),
           py::arg("target"), py::arg("keepalive_time") = 60.0,
           py::arg("keepalive_timeout") = 20.0, py::arg("token") = "",
           py::arg("max_receive_bytes") = -1)
      .def("stream", &nearprep::PyChannel::Stream, py::arg("request"),
           py::arg("pool"), py::arg("timeout") = py::none());
}
