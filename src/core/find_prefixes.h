// Internal: the shared-prefix search of find_shared_prefixes (pagedattn/shared_prefix.h) over a
// page table an op has already validated, so decode can look for shared prefixes without a
// second validation or a CSR copy of the table.
#pragma once

#include "core/problem.h"
#include "pagedattn/shared_prefix.h"

namespace pagedattn::detail {

// table: validated, on the host, with page_size set.
CascadeLayout find_shared_prefixes(const PageTableAccess& table, const SharedPrefixOptions& options);

}  // namespace pagedattn::detail
