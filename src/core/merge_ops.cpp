// merge_state and merge_states: validate, then dispatch to the context's device.
#include <string>
#include <utility>
#include <vector>

#include "core/backend_select.h"
#include "core/overlap.h"
#include "core/validate.h"
#include "cpu/merge_states.h"
#include "pagedattn/error.h"
#include "pagedattn/ops.h"

#if PAGEDATTN_WITH_CUDA
#include "cuda/merge_states.h"
#include "cuda/scoped_device.h"
#endif

namespace pagedattn {

namespace {
const std::initializer_list<DType> kStateTypes = {DType::kF32, DType::kF16, DType::kBF16};

// v [n, heads, dim] contiguous along dim; lse f32 [n, heads] (optional when !lse_required).
cpu::StateView check_state(const Context& ctx, const TensorView& v, const TensorView& lse,
                           const std::string& v_name, const std::string& lse_name,
                           std::int64_t n, std::int64_t heads, std::int64_t dim, bool lse_required) {
  detail::check_tensor(ctx, v, v_name, kStateTypes, 3);
  detail::check_dim(v, v_name, 0, n, "rows");
  detail::check_dim(v, v_name, 1, heads, "num_heads");
  detail::check_dim(v, v_name, 2, dim, "head_dim");
  check_arg(v.stride(2) == 1, [&] { return v_name + " must be contiguous along head_dim"; });
  cpu::StateView s{static_cast<std::byte*>(v.data()), v.dtype(), v.stride(0), v.stride(1)};
  if (lse_required || lse.defined()) {
    detail::check_tensor(ctx, lse, lse_name, {DType::kF32}, 2);
    detail::check_dim(lse, lse_name, 0, n, "rows");
    detail::check_dim(lse, lse_name, 1, heads, "num_heads");
    s.lse = lse.data_as<float>();
    s.lse_row_stride = lse.stride(0);
    s.lse_head_stride = lse.stride(1);
  }
  return s;
}

// "v_out f32[...] ... starts 32 bytes after v_a f32[...] ...": two views that overlap.
std::string relative(const TensorView& x, const std::string& x_name, const TensorView& y, const std::string& y_name) {
  const std::ptrdiff_t delta = static_cast<const std::byte*>(x.data()) - static_cast<const std::byte*>(y.data());
  const std::string where = delta == 0 ? std::string("at")
                            : delta < 0  ? std::to_string(-delta) + " bytes before"
                                         : std::to_string(delta) + " bytes after";
  return x_name + " " + x.describe() + " starts " + where + " " + y_name + " " + y.describe();
}

constexpr const char* kAliasRule = "an output may share memory with an input only element for element";

// Each (row, head) reads all of its inputs before it writes (on the CPU and on CUDA), so an
// output may be an input element for element. Any other shared byte lets one (row, head)'s
// write reach an input that another has yet to read, making the result depend on the order of
// the work: rejected, for both backends, before anything is written.
void check_output(const TensorView& out, const std::string& out_name, const TensorView& in,
                  const std::string& in_name) {
  check_arg(detail::same_view(out, in) || !detail::views_overlap(out, in), [&] {
    return out_name + " overlaps " + in_name + " without being the same view of it (" +
           relative(out, out_name, in, in_name) + "): " + kAliasRule;
  });
}

// merge_states' inputs hold all states in one tensor (dimension 1): an output may be one of
// them element for element and share no memory with the others.
void check_output_of_states(const TensorView& out, const std::string& out_name, const TensorView& in,
                            const std::string& in_name) {
  for (std::int64_t i = 0; i < in.size(1); ++i) {
    if (!detail::same_view(out, in.select(1, i))) continue;
    // One state exactly; the others share none of its memory unless `in` repeats elements
    // (a broadcast dimension), which the element-wise test below then settles.
    if (detail::elements_distinct(in)) return;
    for (std::int64_t j = 0; j < in.size(1); ++j) {
      check_output(out, out_name, in.select(1, j), in_name + " state " + std::to_string(j));
    }
    return;
  }
  check_arg(!detail::views_overlap(out, in), [&] {
    return out_name + " overlaps " + in_name + " without being one of its states (" +
           relative(out, out_name, in, in_name) + "): " + kAliasRule;
  });
}

// Each output element is written once (a broadcast output would take racing writes), and the
// two outputs never share memory.
void check_outputs_apart(const TensorView& v_out, const TensorView& lse_out) {
  detail::check_distinct_elements(v_out, "v_out");
  if (lse_out.defined()) detail::check_distinct_elements(lse_out, "lse_out");
  check_arg(!lse_out.defined() || !detail::views_overlap(v_out, lse_out), [&] {
    return "lse_out overlaps v_out (" + relative(lse_out, "lse_out", v_out, "v_out") +
           "): the outputs may not share memory";
  });
}

#if PAGEDATTN_WITH_CUDA
// A validated state as the CUDA kernel takes it: one state (count 1) of a set.
cuda::StateSet one_state(const cpu::StateView& s) {
  return {s.v, s.dtype, s.v_row_stride, 0, s.v_head_stride, s.lse, s.lse_row_stride, 0,
          s.lse_head_stride, 1};
}
cuda::StateOut state_out(const cpu::StateView& s) {
  return {s.v, s.dtype, s.v_row_stride, s.v_head_stride, s.lse, s.lse_row_stride, s.lse_head_stride};
}
#endif
}  // namespace

void merge_state(const Context& ctx, const TensorView& v_a, const TensorView& lse_a,
                 const TensorView& v_b, const TensorView& lse_b, const TensorView& v_out,
                 const TensorView& lse_out) {
  detail::require_backend(ctx, "merge_state");
  detail::check_tensor(ctx, v_a, "v_a", kStateTypes, 3);
  const std::int64_t n = v_a.size(0), heads = v_a.size(1), dim = v_a.size(2);
  const cpu::StateView states[2] = {
      check_state(ctx, v_a, lse_a, "v_a", "lse_a", n, heads, dim, true),
      check_state(ctx, v_b, lse_b, "v_b", "lse_b", n, heads, dim, true)};
  const cpu::StateView out = check_state(ctx, v_out, lse_out, "v_out", "lse_out", n, heads, dim, false);
  for (auto [o, o_name] : {std::pair{&v_out, "v_out"}, std::pair{&lse_out, "lse_out"}}) {
    if (!o->defined()) continue;
    for (auto [in, in_name] :
         {std::pair{&v_a, "v_a"}, std::pair{&lse_a, "lse_a"}, std::pair{&v_b, "v_b"}, std::pair{&lse_b, "lse_b"}}) {
      check_output(*o, o_name, *in, in_name);
    }
  }
  check_outputs_apart(v_out, lse_out);
  if (ctx.device.type == DeviceType::kCUDA) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    const cuda::StateSet sets[2] = {one_state(states[0]), one_state(states[1])};
    cuda::merge_states(sets, 2, state_out(out), n, heads, dim, ctx.stream);
#endif
    return;
  }
  cpu::merge_states(states, out, nullptr, n, heads, dim, ctx.num_threads);
}

void merge_states(const Context& ctx, const TensorView& v, const TensorView& lse,
                  const TensorView& v_out, const TensorView& lse_out) {
  detail::require_backend(ctx, "merge_states");
  detail::check_tensor(ctx, v, "v", kStateTypes, 4);
  detail::check_tensor(ctx, lse, "lse", {DType::kF32}, 3);
  const std::int64_t n = v.size(0), num_states = v.size(1), heads = v.size(2), dim = v.size(3);
  detail::check_dim(lse, "lse", 0, n, "rows");
  detail::check_dim(lse, "lse", 1, num_states, "num_states");
  detail::check_dim(lse, "lse", 2, heads, "num_heads");
  check_arg(v.stride(3) == 1, "v must be contiguous along head_dim");
  const cpu::StateView out = check_state(ctx, v_out, lse_out, "v_out", "lse_out", n, heads, dim, false);
  for (auto [o, o_name] : {std::pair{&v_out, "v_out"}, std::pair{&lse_out, "lse_out"}}) {
    if (!o->defined()) continue;
    for (auto [in, in_name] : {std::pair{&v, "v"}, std::pair{&lse, "lse"}}) {
      check_output_of_states(*o, o_name, *in, in_name);
    }
  }
  check_outputs_apart(v_out, lse_out);
  if (ctx.device.type == DeviceType::kCUDA) {
#if PAGEDATTN_WITH_CUDA
    const cuda::ScopedDevice on_device(ctx.device.index);
    // All num_states states form one strided set.
    const cuda::StateSet set{static_cast<const std::byte*>(v.data()), v.dtype(), v.stride(0), v.stride(1),
                             v.stride(2), lse.data_as<const float>(), lse.stride(0), lse.stride(1),
                             lse.stride(2), num_states};
    cuda::merge_states(&set, 1, state_out(out), n, heads, dim, ctx.stream);
#endif
    return;
  }
  std::vector<cpu::StateView> states;
  for (std::int64_t i = 0; i < num_states; ++i) {
    states.push_back({static_cast<std::byte*>(v.element_ptr({0, i, 0, 0})), v.dtype(), v.stride(0),
                      v.stride(2), static_cast<float*>(lse.element_ptr({0, i, 0})), lse.stride(0),
                      lse.stride(2)});
  }
  cpu::merge_states(states, out, nullptr, n, heads, dim, ctx.num_threads);
}

}  // namespace pagedattn
