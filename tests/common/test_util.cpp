#include "common/test_util.h"

namespace zeroshard::test {

Session& session() {
  Session* s = Session::current();
  if (s == nullptr) throw std::logic_error("no zeroshard Session: link the test with zs_test_main");
  return *s;
}

std::shared_ptr<Communicator> world() { return session().world(); }
int rank() { return session().rank(); }
int world_size() { return session().world_size(); }

CommOptions test_comm_options(const std::string& name) {
  CommOptions o = session().comm_options(name);
  o.abort_on_timeout = false;
  return o;
}

void barrier() { world()->barrier()->wait(); }

}  // namespace zeroshard::test
