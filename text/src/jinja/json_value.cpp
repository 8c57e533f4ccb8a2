// SPDX-License-Identifier: Apache-2.0
#include "jinja/json_value.h"

#include <nlohmann/json.hpp>

#include "zeroshard/base/error.h"

namespace zeroshard::text::jinja {
namespace {

using Json = nlohmann::ordered_json;

Value convert(const Json& j, const std::string& where) {
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value(j.get<bool>());
    case Json::value_t::number_integer: return Value(j.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) ZS_THROW(ConfigError, where, ": the integer ", u, " is too large");
      return Value(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float: return Value(j.get<double>());
    case Json::value_t::string: return Value(j.get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      for (const Json& item : j) items.push_back(convert(item, where));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      ValueDict members;
      for (const auto& [key, value] : j.items()) members.set(key, convert(value, where));
      return Value::dict(std::move(members));
    }
    default: ZS_THROW(ConfigError, where, ": unsupported JSON value");
  }
}

}  // namespace

Value value_from_json(const std::string& text, const std::string& where) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    ZS_THROW(ConfigError, where, ": not valid JSON: ", e.what());
  }
  return convert(j, where);
}

}  // namespace zeroshard::text::jinja
