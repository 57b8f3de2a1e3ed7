#!/bin/bash
# Harbor runs this after the agent: it runs the binary the agent built (it never compiles it
# itself), and the reward file is the verdict.
check() {  # check EXPECTED INPUT
  got=$(printf "$2" | /app/wordcount) || return 1
  [ "$got" = "$1" ] || { echo "expected $1 for '$2', got $got"; return 1; }
}
if [ -x /app/wordcount ] \
   && check 3 'a  b\n\tc\n' && check 0 '' && check 0 ' \n\t ' \
   && check 2 'one two' && check 3 '  lead and trail  \n'; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
