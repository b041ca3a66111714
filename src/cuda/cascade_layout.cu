// Decode as a cascade over a layout found on the host: upload the layout, then run it; and the
// host-side description of a level that both CUDA cascade entry points use.
#include <algorithm>

#include "cuda/cascade.h"
#include "cuda/cuda_check.h"
#include "cuda/pinned_upload.h"
#include "cuda/workspace.h"

namespace pagedattn::cuda {

void describe_level(const detail::PageTableAccess& host_table, const std::int32_t* host_map, std::int64_t num_seqs,
                    CascadeLevelDesc& desc) {
  std::vector<std::int64_t> users(static_cast<std::size_t>(host_table.num_rows), 0);
  desc.seq_lens.assign(static_cast<std::size_t>(num_seqs), 0);
  desc.max_users = 0;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int32_t r = host_map[s];
    if (r < 0) continue;
    desc.seq_lens[static_cast<std::size_t>(s)] = host_table.row(r).kv_len;
    desc.max_users = std::max(desc.max_users, ++users[static_cast<std::size_t>(r)]);
  }
}

namespace {

// [indptr (rows + 1) | rows unused | users of row 0, of row 1, ... (num_seqs)], users in
// sequence order; sequences without a row at this level are left out.
std::vector<std::int32_t> group_users(const CascadeLayout::Level& level, std::int64_t num_seqs) {
  const auto rows = static_cast<std::int64_t>(level.table.last_page_len.size());
  std::vector<std::int32_t> g(static_cast<std::size_t>(2 * rows + 1 + num_seqs), 0);
  std::int32_t* indptr = g.data();
  std::int32_t* order = g.data() + 2 * rows + 1;
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int32_t r = level.seq_to_row[static_cast<std::size_t>(s)];
    if (r >= 0) ++indptr[r + 1];
  }
  for (std::int64_t r = 0; r < rows; ++r) indptr[r + 1] += indptr[r];
  std::vector<std::int32_t> cursor(indptr, indptr + rows);
  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int32_t r = level.seq_to_row[static_cast<std::size_t>(s)];
    if (r >= 0) order[cursor[static_cast<std::size_t>(r)]++] = static_cast<std::int32_t>(s);
  }
  return g;
}

}  // namespace

bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status), "stream capture status");
  return status != cudaStreamCaptureStatusNone;
}

bool decode_as_cascade(const detail::AttentionProblem& base, const CascadeLayout& layout, int device,
                       void* workspace, std::size_t workspace_bytes, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const std::int64_t S = base.num_seqs, P = base.kv.page_size;
  if (layout.levels.size() > kMaxCascadeLevels) return false;  // deeper nesting: plain decode
  // Every level's indptr, indices, last_page_len and seq_to_row, back to back in one upload;
  // the descriptors hold offsets into it until the workspace is known.
  std::vector<std::int32_t> packed;
  auto append = [&packed](const std::vector<std::int32_t>& v) {
    const std::size_t off = packed.size();
    packed.insert(packed.end(), v.begin(), v.end());
    return off;
  };
  struct Offsets { std::size_t indptr, indices, last, map, groups; };
  std::vector<Offsets> at;
  std::vector<CascadeLevelDesc> descs(layout.levels.size());
  for (std::size_t l = 0; l < layout.levels.size(); ++l) {
    const CascadeLayout::Level& level = layout.levels[l];
    const CsrPageTableData& t = level.table;
    Offsets o{};
    o.indptr = append(t.indptr);
    o.indices = append(t.indices);
    o.last = append(t.last_page_len);
    o.map = append(level.seq_to_row);
    at.push_back(o);
    // The host view of the level until its upload has device pointers to give it.
    CascadeLevelDesc& d = descs[l];
    d.table.num_rows = static_cast<std::int64_t>(t.last_page_len.size());
    d.table.page_size = P;
    d.table.indptr = t.indptr.data();
    d.table.indices = t.indices.data();
    d.table.last_page_len = t.last_page_len.data();
    describe_level(d.table, level.seq_to_row.data(), S, d);
  }
  const CascadePlan plan = plan_cascade(base, descs, device);
  // The shared levels' users grouped by row here, as the set-up kernel would on the device
  // (cascade.h: CascadeLevelDesc::groups), so that no set-up launch precedes the levels.
  for (std::size_t l = 0; l < descs.size(); ++l) {
    at[l].groups = plan.levels[l].shared ? append(group_users(layout.levels[l], S)) : 0;
  }
  const std::size_t upload_bytes = packed.size() * sizeof(std::int32_t);
  const std::size_t total = plan.workspace_bytes + upload_bytes;
  if (workspace != nullptr && workspace_bytes < total) return false;
  const Workspace scratch(total, workspace, workspace_bytes, stream, "decode's cascade");
  auto* uploaded = reinterpret_cast<std::int32_t*>(scratch.get() + plan.workspace_bytes);
  upload_staged(uploaded, packed.data(), upload_bytes, stream);
  for (std::size_t l = 0; l < descs.size(); ++l) {
    descs[l].table.indptr = uploaded + at[l].indptr;
    descs[l].table.indices = uploaded + at[l].indices;
    descs[l].table.last_page_len = uploaded + at[l].last;
    descs[l].seq_to_row = uploaded + at[l].map;
    if (plan.levels[l].shared) descs[l].groups = uploaded + at[l].groups;
  }
  cascade_decode(base, descs, plan, scratch.get(), plan.workspace_bytes, stream);
  return true;
}

}  // namespace pagedattn::cuda
