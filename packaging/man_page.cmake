# Writes one gzipped man page from a roff template and the program's own --help, so the page cannot drift from
# the options. The template's @VERSION@ and @DATE@ are replaced, and @HELP@ by the help of the program and of
# each command it lists under Subcommands (CLI11's help), as no-fill roff with backslashes, minus signs and
# leading dots escaped. Run at build time by packaging/CMakeLists.txt:
#   cmake -DPROGRAM=exe -DTEMPLATE=x.1.in -DOUTPUT=x.1.gz -DVERSION=v -DDATE=yyyy-mm-dd -P man_page.cmake
cmake_minimum_required(VERSION 3.22)  # policies of the project, also in script mode
foreach(var PROGRAM TEMPLATE OUTPUT VERSION DATE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "man_page.cmake: -D${var}=... is required")
  endif()
endforeach()
get_filename_component(program_name "${PROGRAM}" NAME)

function(run_help out_var)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "man_page.cmake: `${ARGN}` exited with ${rc}: ${err}")
  endif()
  # Qt's usage line names the program by argv[0]: the build path, not the installed name.
  string(REPLACE "${PROGRAM}" "${program_name}" text "${text}")
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# Help text -> no-fill roff block.
function(to_roff out_var text)
  string(REGEX REPLACE "[ \t]+\n" "\n" text "${text}")
  string(REGEX REPLACE "\n+$" "" text "${text}")
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  # A line starting with . or ' would be read as a request.
  string(REGEX REPLACE "^([.'])" "\\\\&\\1" text "${text}")
  string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" text "${text}")
  set(${out_var} ".nf\n${text}\n.fi\n" PARENT_SCOPE)
endfunction()

# CLI11 lists commands after a "Subcommands:" line, one per line indented by two spaces: document each with its
# own --help, and its commands in turn (varrate bench prefill).
function(document_commands out_var help)
  set(roff "")
  string(REGEX MATCH "\n[Ss][Uu][Bb][Cc][Oo][Mm][Mm][Aa][Nn][Dd][Ss]:\n.*" listing "${help}")
  string(REGEX MATCHALL "\n  [a-z][a-z0-9-]*" commands "${listing}")
  foreach(entry IN LISTS commands)
    string(STRIP "${entry}" command)
    run_help(command_help "${PROGRAM}" ${ARGN} ${command} --help)
    to_roff(command_roff "${command_help}")
    string(JOIN " " title ${program_name} ${ARGN} ${command})
    string(REPLACE "-" "\\-" title "${title}")
    string(APPEND roff ".SS \"${title}\"\n${command_roff}")
    document_commands(nested_roff "${command_help}" ${ARGN} ${command})
    string(APPEND roff "${nested_roff}")
  endforeach()
  set(${out_var} "${roff}" PARENT_SCOPE)
endfunction()

run_help(main_help "${PROGRAM}" --help)
to_roff(help_roff "${main_help}")
document_commands(commands_roff "${main_help}")
if(commands_roff)
  string(APPEND help_roff ".SH COMMANDS\n${commands_roff}")
endif()

file(READ "${TEMPLATE}" page)
string(REPLACE "@VERSION@" "${VERSION}" page "${page}")
string(REPLACE "@DATE@" "${DATE}" page "${page}")
string(REPLACE "@HELP@\n" "${help_roff}" page "${page}")
get_filename_component(out_dir "${OUTPUT}" DIRECTORY)
string(REGEX REPLACE "\\.gz$" "" roff_file "${OUTPUT}")
file(WRITE "${roff_file}" "${page}")
# Debian compresses man pages with gzip -9n (no name, no time stamp: reproducible).
execute_process(COMMAND gzip -9n -c "${roff_file}" OUTPUT_FILE "${OUTPUT}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "man_page.cmake: gzip failed on ${roff_file}")
endif()
