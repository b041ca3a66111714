"""The paged cache every paged decode competitor reads (bench/flashinfer_decode.py,
bench/fa3_decode.py): pages of 16 tokens, K and V stacked per page as [pages, 2, 16, kv_heads,
head_dim] (NHD), random values, a random permutation of the pool as the page table, and the
float32 reference each competitor's output is checked against."""
import math

import torch

PAGE_SIZE = 16


def paged_cache(lens, hkv, d, kv_dtype):
    """A pool holding exactly the batch's pages, filled with random values, and the CSR page
    table over a random permutation of the pool (neighbouring pages of a sequence are not
    neighbours in memory, as in a cache that has served many requests)."""
    pages_per_seq = [math.ceil(n / PAGE_SIZE) for n in lens]
    num_pages = sum(pages_per_seq)
    # fp8 values are drawn in bf16 and rounded: N(0, 1) lies well inside e4m3's range.
    kv = torch.randn(num_pages, 2, PAGE_SIZE, hkv, d, device="cuda", dtype=torch.bfloat16).to(kv_dtype)
    indptr = torch.tensor([0] + pages_per_seq, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    indices = torch.randperm(num_pages, dtype=torch.int32)
    last_page_len = torch.tensor([n - (p - 1) * PAGE_SIZE for n, p in zip(lens, pages_per_seq)],
                                 dtype=torch.int32)
    return kv, indptr.cuda(), indices.cuda(), last_page_len.cuda()


def reference_error(q, kv, indptr, indices, lens, out, seqs):
    """Largest absolute difference between `out` and a float32 softmax(q K^T / sqrt(d)) V over
    sequences `seqs`, gathered from the pages through the same table; infinity where `out` holds
    a NaN there (which max() would otherwise pass over)."""
    hq, hkv, d = q.shape[1], kv.shape[3], q.shape[2]
    # Gathered as bytes where the dtype is one byte wide: indexing kernels need not take fp8.
    raw = kv.view(torch.uint8) if kv.element_size() == 1 else kv
    worst = 0.0
    for i in seqs:
        pages = indices[indptr[i]:indptr[i + 1]].long().to(kv.device)
        k, v = (raw[pages, j].view(kv.dtype).float().reshape(-1, hkv, d)[:lens[i]] for j in (0, 1))
        group = hq // hkv
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q[i].float(), k) / math.sqrt(d)
        expect = torch.einsum("ht,thd->hd", scores.softmax(dim=-1), v)
        diff = (out[i].float() - expect).abs().max().item()
        worst = max(worst, math.inf if math.isnan(diff) else diff)
    return worst


def padded_block_table(indptr, indices):
    """The CSR page table as XQA takes it: one row of page ids per sequence, padded (with page
    0, which the kernel does not read past a sequence's length) to the longest."""
    indptr, indices = indptr.cpu(), indices.cpu()
    rows = [indices[indptr[i]:indptr[i + 1]] for i in range(len(indptr) - 1)]
    table = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return table.cuda()

