// Python's jsonschema as the reference validator for structured output:
// Debian's python3-jsonschema under /usr/bin/python3 (the `python3` on PATH
// may be another interpreter), one process for a whole batch.
#ifndef KVSERVE_TESTS_TESTING_JSONSCHEMA_REFERENCE_H_
#define KVSERVE_TESTS_TESTING_JSONSCHEMA_REFERENCE_H_

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::testing {

struct SchemaCheck {
  std::string schema;    // the schema's JSON text
  std::string instance;  // the text to validate
};

// The real-world schemas of SharedDir()/jsonschema (<dataset>/<name>.json),
// sorted.
std::vector<std::filesystem::path> SharedJsonSchemas();

// Why the reference cannot run on this machine; empty when it can.
std::string JsonschemaUnavailable();

// One message per check, in order: empty when the instance is JSON that
// validates against the schema, else why not.
absl::StatusOr<std::vector<std::string>> ValidateWithJsonschema(
    const std::vector<SchemaCheck>& checks);

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TESTING_JSONSCHEMA_REFERENCE_H_
