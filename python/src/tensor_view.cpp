#include <string>

#include "bindings.hpp"
#include "seqmix/error.hpp"

namespace seqmix::python {
namespace {

DType to_dtype(nb::dlpack::dtype dt, const char* arg) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(dt.code);
  if (dt.lanes == 1) {
    if (code == Code::Bfloat && dt.bits == 16) return DType::bf16;
    if (code == Code::Float && dt.bits == 16) return DType::f16;
    if (code == Code::Float && dt.bits == 32) return DType::f32;
    if (code == Code::Float && dt.bits == 64) return DType::f64;
    if (code == Code::Int && dt.bits == 32) return DType::i32;
    if (code == Code::Int && dt.bits == 64) return DType::i64;
  }
  throw Error(std::string("seqmix: argument '") + arg +
              "': expected dtype bf16, f16, f32, f64, int32 or int64, got DLPack code " +
              std::to_string(dt.code) + " with " + std::to_string(dt.bits) + " bits");
}

template <class Array>
Tensor make_view(const Array& a, const char* arg) {
  Tensor t;
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = to_dtype(a.dtype(), arg);
  const int device_type = a.device_type();
  if (device_type == nb::device::cpu::value) {
    t.device = Device::cpu();
  } else if (device_type == nb::device::cuda::value) {
    t.device = Device::cuda(a.device_id());
  } else {
    throw Error(std::string("seqmix: argument '") + arg + "': expected a CPU or CUDA array, got DLPack device type " +
                std::to_string(device_type));
  }
  for (size_t i = 0; i < a.ndim(); ++i) {
    t.shape.push_back(static_cast<int64_t>(a.shape(i)));
    t.strides.push_back(static_cast<int64_t>(a.stride(i)));
  }
  return t;
}

// Interned attribute names and the torch objects the reader compares against, looked up
// once. torch is never imported from here: until the caller has imported it, nothing is a
// torch.Tensor.
struct TorchNames {
  PyTypeObject* tensor_type = nullptr;  // torch._C.TensorBase
  PyObject* dtypes[6] = {};             // torch.bfloat16 ... torch.int64, in DType order
  PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
  PyObject* dtype = PyUnicode_InternFromString("dtype");
  PyObject* get_device = PyUnicode_InternFromString("get_device");
  PyObject* shape = PyUnicode_InternFromString("shape");
  PyObject* stride = PyUnicode_InternFromString("stride");
  PyObject* contiguous = PyUnicode_InternFromString("contiguous");

  // True once torch is loaded and its objects are found (references kept for the process).
  bool ready() {
    if (tensor_type) return true;
    static PyObject* const torch_name = PyUnicode_InternFromString("torch");
    PyObject* torch = PyImport_GetModule(torch_name);  // no import: NULL while not loaded
    if (!torch) {
      PyErr_Clear();
      return false;
    }
    PyObject* c = PyObject_GetAttrString(torch, "_C");
    PyObject* base = c ? PyObject_GetAttrString(c, "TensorBase") : nullptr;
    const char* names[6] = {"bfloat16", "float16", "float32", "float64", "int32", "int64"};
    bool ok = base && PyType_Check(base);
    for (int i = 0; ok && i < 6; ++i) ok = (dtypes[i] = PyObject_GetAttrString(torch, names[i])) != nullptr;
    Py_XDECREF(c);
    Py_DECREF(torch);
    if (!ok) {  // a torch without these names: its tensors take the DLPack path
      PyErr_Clear();
      Py_XDECREF(base);
      return false;
    }
    tensor_type = reinterpret_cast<PyTypeObject*>(base);
    return true;
  }
};

TorchNames& torch_names() {
  static TorchNames* names = new TorchNames();  // never destroyed: outlives the interpreter's teardown
  return *names;
}

// str(object), or `fallback` when that fails (the error is cleared).
std::string text(PyObject* object, const char* fallback) {
  PyObject* s = object ? PyObject_Str(object) : nullptr;
  const char* c = s ? PyUnicode_AsUTF8(s) : nullptr;
  std::string result = c ? c : fallback;
  Py_XDECREF(s);
  PyErr_Clear();
  return result;
}

// The Python error raised while reading a tensor, as text; the error is cleared.
std::string python_error() {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  std::string message = text(value, "its data pointer, shape or strides could not be read");
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
  return message;
}

// Reads a tuple of ints (torch.Size, stride()) into `out`.
bool read_ints(PyObject* tuple, std::vector<int64_t>& out) {
  if (!tuple || !PyTuple_Check(tuple)) return false;
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
  return !PyErr_Occurred();
}

// Pointer and strides of `x` (a new reference to it is taken).
bool read_storage(TorchNames& names, PyObject* x, TorchTensor& out) {
  out.owner = nb::borrow(x);
  PyObject* ptr = PyObject_CallMethodNoArgs(x, names.data_ptr);
  PyObject* strides = PyObject_CallMethodNoArgs(x, names.stride);
  bool ok = ptr && read_ints(strides, out.view.strides);
  if (ok) out.view.data = PyLong_AsVoidPtr(ptr);
  Py_XDECREF(ptr);
  Py_XDECREF(strides);
  return ok && !PyErr_Occurred();
}

}  // namespace

bool torch_tensor(nb::handle src, TorchTensor& out) noexcept {
  TorchNames& names = torch_names();
  if (!names.ready() || !PyObject_TypeCheck(src.ptr(), names.tensor_type)) return false;
  PyObject* x = src.ptr();
  PyObject* dtype = PyObject_GetAttr(x, names.dtype);
  int code = -1;
  for (int i = 0; i < 6; ++i)
    if (dtype == names.dtypes[i]) code = i;
  if (code < 0) {
    out.error = std::string("expected dtype bf16, f16, f32, f64, int32 or int64, got ") +
                (dtype ? text(dtype, "an unknown dtype") : python_error());
    Py_XDECREF(dtype);
    return true;
  }
  Py_DECREF(dtype);
  out.view.dtype = static_cast<DType>(code);
  PyObject* device = PyObject_CallMethodNoArgs(x, names.get_device);  // -1 on the CPU
  PyObject* shape = PyObject_GetAttr(x, names.shape);
  bool ok = device && read_ints(shape, out.view.shape);
  const long index = ok ? PyLong_AsLong(device) : 0;
  Py_XDECREF(device);
  Py_XDECREF(shape);
  ok = ok && !PyErr_Occurred() && read_storage(names, x, out);
  // The kernels read rows with a unit stride: a strided last dimension is copied first.
  const auto& s = out.view.shape;
  if (ok && !s.empty() && out.view.strides.back() != 1 && s.back() != 1) {
    PyObject* dense = PyObject_CallMethodNoArgs(x, names.contiguous);
    ok = dense && read_storage(names, dense, out);
    Py_XDECREF(dense);
  }
  if (!ok) {
    out.error = python_error();
    return true;
  }
  out.view.device = index >= 0 ? Device::cuda(static_cast<int>(index)) : Device::cpu();
  return true;
}

namespace {

template <class Variant>
Tensor variant_view(const Variant& array, const char* arg) {
  return std::visit(
      [&](const auto& a) {
        if constexpr (std::is_same_v<std::decay_t<decltype(a)>, TorchTensor>) {
          if (!a.error.empty()) throw Error(std::string("seqmix: argument '") + arg + "': " + a.error);
          return a.view;
        } else {
          return make_view(a, arg);
        }
      },
      array);
}

}  // namespace

Tensor view(const In& array, const char* arg) { return variant_view(array, arg); }
Tensor view(const Out& array, const char* arg) { return variant_view(array, arg); }
std::optional<Tensor> view(const OptIn& array, const char* arg) {
  return array ? std::optional<Tensor>(view(*array, arg)) : std::nullopt;
}
std::optional<Tensor> view(const OptOut& array, const char* arg) {
  return array ? std::optional<Tensor>(view(*array, arg)) : std::nullopt;
}

}  // namespace seqmix::python
