// Argument plumbing of the binding: Status -> Python exceptions, DLPack array checks whose errors
// name the argument, and the string names of the library's enums. Included by fp4moe_ext.cpp only.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "fp4moe/format.h"
#include "fp4moe/moe.h"
#include "fp4moe/routing.h"
#include "fp4moe/status.h"

#if FP4MOE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace fp4moe::py {

namespace nb = nanobind;

// ---- Errors --------------------------------------------------------------------------------------

// A non-ok Status on its way to Python; the translator below picks the exception class by code.
struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)) {}
  const char* what() const noexcept override { return status.message().c_str(); }
  Status status;
};

inline PyObject* g_error = nullptr;             // fp4moe.Fp4moeError(RuntimeError)
inline PyObject* g_invalid_argument = nullptr;  // fp4moe.InvalidArgumentError(Fp4moeError, ValueError)
inline PyObject* g_unsupported = nullptr;       // fp4moe.UnsupportedError(Fp4moeError, NotImplementedError)
inline PyObject* g_cuda_error = nullptr;        // fp4moe.CudaError(Fp4moeError)
inline PyObject* g_io_error = nullptr;          // fp4moe.IoError(Fp4moeError)

inline void check(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename... Args>
[[noreturn]] void fail_invalid(const Args&... args) {
  throw StatusError(invalid_argument(args...));
}

template <typename... Args>
[[noreturn]] void fail_unsupported(const Args&... args) {
  throw StatusError(unsupported(args...));
}

inline void raise_status(const Status& s) {
  PyObject* cls = g_error;
  if (s.code() == StatusCode::kInvalidArgument) cls = g_invalid_argument;
  else if (s.code() == StatusCode::kUnsupported) cls = g_unsupported;
  else if (s.code() == StatusCode::kCudaError) cls = g_cuda_error;
  else if (s.code() == StatusCode::kIoError) cls = g_io_error;
  PyObject* exc = PyObject_CallFunction(cls, "s", s.message().c_str());
  if (!exc) return;  // the constructor raised; leave its error set
  PyObject* code = PyUnicode_FromString(to_string(s.code()));
  if (code) {
    PyObject_SetAttrString(exc, "code", code);
    Py_DECREF(code);
  }
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
}

#if FP4MOE_HAS_CUDA
inline void check_cuda(cudaError_t e, const char* expr) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // taken, so that the library's next launch check does not report it again
    throw StatusError(Status(StatusCode::kCudaError, detail::concat(expr, ": ", cudaGetErrorString(e))));
  }
}
#define FP4MOE_PY_CUDA(expr) check_cuda((expr), #expr)

// Makes `device` current for the scope of a call and restores the caller's device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FP4MOE_PY_CUDA(cudaGetDevice(&previous_));
    if (previous_ != device) FP4MOE_PY_CUDA(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};
#endif

// ---- Arrays --------------------------------------------------------------------------------------

using InArray = nb::ndarray<nb::ro>;  // read through a const pointer; read-only arrays are fine
using OutArray = nb::ndarray<>;       // written

namespace dl = nb::dlpack;

inline std::string dtype_name(dl::dtype t) {
  const int bits = t.bits;
  std::string base;
  switch (static_cast<dl::dtype_code>(t.code)) {
    case dl::dtype_code::Int: base = "int" + std::to_string(bits); break;
    case dl::dtype_code::UInt: base = "uint" + std::to_string(bits); break;
    case dl::dtype_code::Float: base = "float" + std::to_string(bits); break;
    case dl::dtype_code::Bfloat: base = "bfloat" + std::to_string(bits); break;
    case dl::dtype_code::Bool: base = "bool"; break;
    case dl::dtype_code::Float8_E4M3FN: base = "float8_e4m3fn"; break;
    case dl::dtype_code::Float8_E8M0FNU: base = "float8_e8m0fnu"; break;
    case dl::dtype_code::Float8_E5M2: base = "float8_e5m2"; break;
    case dl::dtype_code::Float4_E2M1FN: base = "float4_e2m1fn"; break;
    default: base = "dtype(code=" + std::to_string(int(t.code)) + ", bits=" + std::to_string(bits) + ")"; break;
  }
  if (t.lanes != 1) base += "x" + std::to_string(t.lanes);
  return base;
}

constexpr dl::dtype kF32{uint8_t(dl::dtype_code::Float), 32, 1};
constexpr dl::dtype kBF16{uint8_t(dl::dtype_code::Bfloat), 16, 1};
constexpr dl::dtype kU8{uint8_t(dl::dtype_code::UInt), 8, 1};
constexpr dl::dtype kI32{uint8_t(dl::dtype_code::Int), 32, 1};
constexpr dl::dtype kE4M3{uint8_t(dl::dtype_code::Float8_E4M3FN), 8, 1};
constexpr dl::dtype kE8M0{uint8_t(dl::dtype_code::Float8_E8M0FNU), 8, 1};

// Where an array lives. Pinned host memory (cuda_host) is host memory for the CPU code.
struct Place {
  bool cuda = false;
  int device_id = 0;
  bool operator==(const Place& o) const { return cuda == o.cuda && (!cuda || device_id == o.device_id); }
  std::string str() const { return cuda ? "cuda:" + std::to_string(device_id) : "cpu"; }
};

template <typename A>
Place place_of(const char* name, const A& a) {
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value: return {false, 0};
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value: return {true, a.device_id()};
    default: fail_invalid(name, " is on DLPack device type ", a.device_type(), "; fp4moe takes CPU or CUDA arrays");
  }
}

template <typename A>
std::string shape_str(const A& a) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
  os << "]";
  return os.str();
}

// An expected extent: a fixed value (>= 0) or any (kAny), named for the error message.
inline constexpr int64_t kAny = -1;
struct Dim {
  const char* name;
  int64_t value;
};

inline std::string dims_str(const std::vector<Dim>& dims) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    os << (i ? ", " : "") << dims[i].name;
    if (dims[i].value != kAny) os << " = " << dims[i].value;
  }
  os << "]";
  return os.str();
}

template <typename A>
void check_contiguous(const char* name, const A& a) {
  if (a.size() == 0) return;  // no element to address: any strides will do
  int64_t expected = 1;
  for (int i = int(a.ndim()) - 1; i >= 0; --i) {
    if (a.shape(i) != 1 && a.stride(i) != expected) {
      std::ostringstream strides;
      for (size_t j = 0; j < a.ndim(); ++j) strides << (j ? ", " : "") << a.stride(j);
      fail_invalid(name, " is not C-contiguous (shape ", shape_str(a), ", strides [", strides.str(),
                   "] in elements); pass a contiguous array (.contiguous(), numpy.ascontiguousarray)");
    }
    expected *= int64_t(a.shape(i));
  }
}

template <typename A>
void check_dtype(const char* name, const A& a, std::initializer_list<dl::dtype> allowed) {
  for (const dl::dtype& t : allowed)
    if (a.dtype() == t) return;
  std::string list;
  for (const dl::dtype& t : allowed) list += (list.empty() ? "" : " or ") + dtype_name(t);
  fail_invalid(name, " has dtype ", dtype_name(a.dtype()), "; expected ", list);
}

template <typename A>
void check_shape(const char* name, const A& a, const std::vector<Dim>& dims) {
  bool ok = a.ndim() == dims.size();
  for (size_t i = 0; ok && i < dims.size(); ++i) ok = dims[i].value == kAny || int64_t(a.shape(i)) == dims[i].value;
  if (!ok) fail_invalid(name, " has shape ", shape_str(a), "; expected ", dims_str(dims));
}

// All checks of one array; returns where it lives.
template <typename A>
Place check_array(const char* name, const A& a, std::initializer_list<dl::dtype> dtypes, const std::vector<Dim>& dims) {
  const Place place = place_of(name, a);
  check_dtype(name, a, dtypes);
  check_shape(name, a, dims);
  check_contiguous(name, a);
  return place;
}

// The error for an object nanobind did not import as an array. The Python layer checks every array
// first and says why (fp4moe/_arrays.py, export); this covers what reaches the extension anyway.
[[noreturn]] inline void fail_not_array(const std::string& label, nb::handle obj) {
  const std::string type = nb::type_name(obj.type()).c_str();
  if (nb::hasattr(obj, "__dlpack__") || nb::hasattr(obj, "__array_interface__")) {
    std::string dtype;
    if (nb::hasattr(obj, "dtype")) {
      const nb::object d = obj.attr("dtype");
      dtype = std::string(" of dtype ") + nb::str(nb::handle(d.ptr())).c_str();  // (str(handle): PyObject_Str)
    }
    fail_invalid(label, " is a ", type, dtype,
                 " that neither DLPack nor the buffer protocol can import: a dtype they cannot carry (such as "
                 "NumPy bfloat16 or float8 of ml_dtypes), a non-native byte order, or read-only where it is written");
  }
  fail_invalid(label, " is a ", type, ", not an array (NumPy, or any DLPack tensor)");
}

// A file system path argument: a str or an os.PathLike (pathlib.Path), as os.fspath takes them.
inline std::string fs_path(const char* name, nb::handle value) {
  PyObject* p = PyOS_FSPath(value.ptr());
  if (!p) {
    PyErr_Clear();
    fail_invalid(name, " is a ", nb::type_name(value.type()).c_str(), "; expected a path (a str or os.PathLike)");
  }
  const nb::object path = nb::steal(p);
  if (PyBytes_Check(p)) return std::string(PyBytes_AS_STRING(p), size_t(PyBytes_GET_SIZE(p)));
  return nb::cast<std::string>(path);
}

inline void check_same_place(const char* name, const Place& got, const char* ref_name, const Place& want) {
  if (!(got == want))
    fail_invalid(name, " is on ", got.str(), " but ", ref_name, " is on ", want.str(),
                 "; all arrays of a call must be on one device");
}

#if FP4MOE_HAS_CUDA
inline cudaStream_t as_stream(uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }
#endif

[[noreturn]] inline void fail_no_cuda(const char* what) {
  fail_unsupported(what, ": this fp4moe build has no CUDA support (FP4MOE_ENABLE_CUDA=OFF); pass CPU arrays");
}

// ---- Enum names ----------------------------------------------------------------------------------

inline GlobalScaleConvention parse_convention(const std::string& s) {
  if (s == "encode") return GlobalScaleConvention::kEncode;
  if (s == "decode") return GlobalScaleConvention::kDecode;
  fail_invalid("convention = '", s,
               "' is not one of: encode (gs = 2688/amax: vLLM, FlashInfer, compressed-tensors *_global_scale), "
               "decode (s2 = amax/2688: ModelOpt weight_scale_2, input_scale)");
}

inline ScaleLayout parse_layout(const std::string& s) {
  if (s == "linear") return ScaleLayout::kLinear;
  if (s == "swizzled" || s == "swizzled128x4") return ScaleLayout::kSwizzled128x4;
  fail_invalid("layout = '", s, "' is not one of: linear, swizzled (alias swizzled128x4)");
}

inline Nvfp4Recipe parse_recipe_name(const std::string& s) {
  Nvfp4Recipe r;
  check(parse_recipe(s.c_str(), &r));
  return r;
}

inline const char* method_name(RoutingMethod m) {
  switch (m) {
    case RoutingMethod::kSoftmaxTopK: return "softmax_topk";
    case RoutingMethod::kDeepSeekV3: return "deepseek_v3";
    case RoutingMethod::kLlama4: return "llama4";
    case RoutingMethod::kTopKSoftmax: return "topk_softmax";
  }
  return "unknown";
}

inline RoutingMethod parse_method(const std::string& s) {
  for (RoutingMethod m :
       {RoutingMethod::kSoftmaxTopK, RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4, RoutingMethod::kTopKSoftmax})
    if (s == method_name(m) || s == to_string(m)) return m;
  fail_invalid("routing method = '", s, "' is not one of: softmax_topk, deepseek_v3, llama4, topk_softmax");
}

inline Activation parse_activation(const std::string& s) {
  if (s == "swiglu") return Activation::kSwiGLU;
  if (s == "gpt-oss" || s == "gpt_oss") return Activation::kGptOss;
  fail_invalid("activation = '", s, "' is not one of: swiglu, gpt-oss");
}

inline WeightFormat parse_format(const std::string& s) {
  if (s == "nvfp4") return WeightFormat::kNvfp4;
  if (s == "mxfp4") return WeightFormat::kMxfp4;
  fail_invalid("weight_format = '", s, "' is not one of: nvfp4, mxfp4");
}

inline Mode parse_mode_name(const std::string& s) {
  Mode m;
  check(parse_mode(s, &m));
  return m;
}

}  // namespace fp4moe::py
