#include "replica/endpoint_list.h"

#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dgt::replica {

absl::StatusOr<std::vector<HostPort>> ParseEndpointList(absl::string_view text, int default_port,
                                                        absl::string_view what) {
  std::vector<absl::string_view> items = absl::StrSplit(text, ',');
  std::vector<HostPort> out;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::string_view item = absl::StripAsciiWhitespace(items[i]);
    if (item.empty()) {
      if (items.size() == 1) return ParseHostPort(item, default_port, what).status();  // "expected"
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": empty item ", i + 1, " in '", text, "'"));
    }
    auto hp = ParseHostPort(item, default_port, what);
    if (!hp.ok()) {
      if (items.size() == 1) return hp.status();
      return absl::InvalidArgumentError(
          absl::StrCat(hp.status().message(), " (item ", i + 1, " of '", text, "')"));
    }
    for (const HostPort& seen : out) {
      if (seen.port == hp->port &&
          absl::AsciiStrToLower(seen.host) == absl::AsciiStrToLower(hp->host)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": '", FormatHostPort(hp->host, hp->port), "' is listed twice in '", text, "'"));
      }
    }
    out.push_back(*std::move(hp));
  }
  return out;
}

std::optional<SameReplica> FindSameReplica(const std::vector<HostPort>& list,
                                           const Resolver& resolve) {
  std::map<std::string, size_t> by_address;
  for (size_t i = 0; list.size() > 1 && i < list.size(); ++i) {
    auto ip = resolve(list[i].host);
    if (!ip.ok()) continue;
    std::string address = FormatHostPort(*ip, list[i].port);
    auto [it, fresh] = by_address.emplace(address, i);
    if (!fresh) return SameReplica{it->second, i, std::move(address)};
  }
  return std::nullopt;
}

bool SameEndpoint(absl::string_view a, absl::string_view b, const Resolver& resolve) {
  auto pa = ParseHostPort(a, -1, "a");
  auto pb = ParseHostPort(b, -1, "b");
  if (!pa.ok() || !pb.ok() || pa->port != pb->port) return false;
  if (absl::AsciiStrToLower(pa->host) == absl::AsciiStrToLower(pb->host)) return true;
  auto ia = resolve(pa->host);
  auto ib = resolve(pb->host);
  return ia.ok() && ib.ok() && *ia == *ib;
}

std::optional<size_t> LeaderIndex(const std::vector<std::string>& endpoints,
                                  absl::string_view standby, absl::string_view leader,
                                  const Resolver& resolve) {
  for (size_t i = 0; !leader.empty() && i < endpoints.size(); ++i) {
    if (endpoints[i] != standby && SameEndpoint(endpoints[i], leader, resolve)) {
      return i;
    }
  }
  return std::nullopt;
}

}  // namespace dgt::replica
