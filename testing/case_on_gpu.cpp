// CaseFixture::run on a GPU: the case's host data mirrored to the device, the op run there with
// the host copies in its options, the outputs (and the padding between their rows) copied back
// over the host tensors, and the device cache compared with the host one afterwards.
#include <memory>
#include <vector>

#include "device_mirror.h"
#include "paged_fixture.h"

namespace pagedattn::testing {

void CaseFixture::run_on_gpu(const Context& ctx) {
  const OpViews host = host_views();
  const DeviceMirror q(host.q), out(host.out), lse(host.lse), indptr(host.qo_indptr), seq_to_row(host.seq_to_row);
  const DeviceMirror k(host.kv.k), v(host.kv.v), k_scales(host.kv.k_head_scales), v_scales(host.kv.v_head_scales);
  const DeviceMirror alibi(host.params.alibi_slopes), sinks(host.params.sinks);
  std::vector<std::unique_ptr<TableMirror>> tables;
  OpViews dev = host;
  dev.q = q.view(), dev.out = out.view(), dev.lse = lse.view();
  dev.qo_indptr = indptr.view(), dev.seq_to_row = seq_to_row.view();
  dev.kv.k = k.view(), dev.kv.v = v.view(), dev.kv.k_head_scales = k_scales.view(), dev.kv.v_head_scales = v_scales.view();
  dev.params.alibi_slopes = alibi.view(), dev.params.sinks = sinks.view();
  dev.tables.clear();
  for (const PageTable& t : host.tables) dev.tables.push_back(tables.emplace_back(std::make_unique<TableMirror>(t))->table());
  run_op(ctx, dev, host);
  synchronize_device("the case's op on the GPU");
  out.download(host.out);
  lse.download(host.lse);
  gpu_cache_intact_ = k.matches(host.kv.k) && v.matches(host.kv.v);
}

}  // namespace pagedattn::testing
